"""``python -m depthbench`` (and ``torchrun -m depthbench train ...``)."""

from depthbench.cli import main

main()
