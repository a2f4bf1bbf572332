"""What a command says while it runs, torch-free (the simulator and the data tools import it
without torch): progress lines and details through Python's ``logging`` (the ``depthbench``
logger, to stdout; ``-q``/``-v`` set its level) and tqdm progress bars on stderr."""

from __future__ import annotations


class _Stdout:
    """A logging handler's stream that is whatever ``sys.stdout`` is when a message is written
    (a test runner swaps it per command)."""
    def write(self, text: str) -> None:
        import sys
        sys.stdout.write(text)

    def flush(self) -> None:
        import sys
        sys.stdout.flush()


def set_verbosity(level: int) -> None:
    """The command line's ``-q`` (-1: results and errors only, no progress) and ``-v`` (1: the
    resolved configs too) through ``logging``: the ``depthbench`` logger's messages go to stdout
    at WARNING, INFO or DEBUG."""
    import logging

    log = logging.getLogger("depthbench")
    if not log.handlers:
        handler = logging.StreamHandler(_Stdout())
        handler.setFormatter(logging.Formatter("%(message)s"))
        log.addHandler(handler)
        log.propagate = False
    log.setLevel(logging.WARNING if level < 0 else logging.DEBUG if level > 0 else logging.INFO)


def say(message: str) -> None:
    """A progress line (hidden by -q): the ``depthbench`` logger at INFO."""
    import logging
    log = logging.getLogger("depthbench")
    if not log.handlers:
        set_verbosity(0)
    log.info(message)


def debug(message: str) -> None:
    """A detail shown only with -v: the ``depthbench`` logger at DEBUG."""
    import logging
    logging.getLogger("depthbench").debug(message)


def quiet() -> bool:
    import logging
    return logging.getLogger("depthbench").getEffectiveLevel() > logging.INFO


def progress_bar(total: int | None, desc: str, unit: str = "it"):
    """A tqdm bar on stderr, off where stderr is not a terminal (a log file, nohup, Slurm), as
    lm-eval and vLLM show theirs, and under -q."""
    import sys

    from tqdm import tqdm
    return tqdm(total=total, desc=desc, unit=unit, disable=not sys.stderr.isatty() or quiet(),
                dynamic_ncols=True, leave=False)
