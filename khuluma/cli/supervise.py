"""Keep what ``khuluma serve`` starts out of reach of a signal sent to its whole process group.

A terminal's Ctrl-C, ``kill -TERM -<pgid>`` and many process managers signal every process of the foreground group
at once. If Ray's raylet and workers were in that group, they would die at the same moment as the command that
should stop them gracefully, and the requests in flight with them. So :func:`split` forks first: the child goes on
to serve in a session (and process group) of its own, with Ray, SeaweedFS and HAProxy below it; the parent keeps
the command's pid and turns into a tiny supervisor (:data:`SUPERVISOR`, a fresh interpreter without site-packages:
a few MB) that forwards each SIGINT/SIGTERM/SIGHUP to the child, once per signal received, and exits with the
child's exit status. So the first signal, to the pid or to the group, starts the graceful stop, and a second one
hurries it, exactly as if the child had received them.

If the supervisor dies (even by SIGKILL), the kernel sends the child SIGTERM (``PR_SET_PDEATHSIG``): it stops
gracefully on its own. Signals are blocked from before the fork until each side has its handlers, so none is lost.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import threading

FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
PR_SET_PDEATHSIG = 1

SUPERVISOR = """
import os, signal, sys
child = int(sys.argv[1])
def forward(signum, frame):
    try:
        os.kill(child, signal.SIGTERM if signum == signal.SIGHUP else signum)
    except ProcessLookupError:
        pass
for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
    signal.signal(sig, forward)
signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM, signal.SIGHUP})
_, status = os.waitpid(child, 0)  # retried by Python after each forwarded signal (PEP 475)
code = os.waitstatus_to_exitcode(status)
sys.exit(code if code >= 0 else 128 - code)
"""


def _own_process() -> bool:
    """Whether this process is the ``khuluma serve`` command itself (its console script, or ``python -m
    khuluma.cli``) with no thread but its main one. Called in-process (a test's CliRunner inside pytest, with Ray's
    threads), a fork would turn the caller into the supervisor and go on running the caller in a child whose
    OpenMP and other thread pools are gone."""
    command = os.path.basename(sys.argv[0]) if sys.argv else ""
    return command in ("khuluma", "__main__.py") and sys.argv[1:2] == ["serve"] and threading.active_count() == 1


def split(*, force: bool = False) -> None:
    """Fork; return in the child, which now leads a session of its own. The parent becomes the supervisor and
    never returns. Does nothing off Linux (no parent-death signal there), nor unless this process is the command
    itself (``force``: it is, whatever it is called); the command then runs as before."""
    if not sys.platform.startswith("linux") or not (force or _own_process()):
        return
    signal.pthread_sigmask(signal.SIG_BLOCK, set(FORWARDED))
    parent = os.getpid()
    sys.stdout.flush()
    sys.stderr.flush()
    child = os.fork()
    if child == 0:
        os.setsid()  # a new session and process group: signals to the command's group do not reach it
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)  # the supervisor gone, even killed: stop gracefully
        if os.getppid() != parent:  # it died before prctl took effect
            os._exit(1)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, set(FORWARDED))
        return
    os.execv(sys.executable, [sys.executable, "-I", "-S", "-c", SUPERVISOR, str(child)])
