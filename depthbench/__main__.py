"""``python -m depthbench`` (and ``torchrun -m depthbench train ...``)."""

from depthbench.cli.main import main

main()
