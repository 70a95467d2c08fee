"""Errors the library raises; only the CLI turns them into exit codes and one-line messages."""

EXIT_OK = 0
EXIT_FINDINGS = 1        # a finding at or above --fail-on
EXIT_USAGE = 2           # bad arguments, unreadable input, invalid rule files
EXIT_SCRIPT_FAILED = 3   # the audited script raised, exited non-zero, crashed or timed out
EXIT_INTERNAL = 4        # a bug in perfaudit (the report says what was collected before it)
EXIT_INTERRUPTED = 130   # Ctrl-C


class PerfauditError(Exception):
    """An error with a message fit for one line on stderr."""

    exit_code = EXIT_USAGE


class UsageError(PerfauditError):
    pass


class WriteError(PerfauditError, OSError):
    """A file perfaudit was writing could not be written (no space, read-only, permission); the file that
    was there is intact. An OSError too, so callers that collect write failures still catch it."""

    def __str__(self) -> str:
        return self.message

    def __init__(self, path: str, code: int, why: str):
        OSError.__init__(self, code, why)
        self.message = f"cannot write {path}: {why} (the file that was there is unchanged)"


class TraceError(PerfauditError):
    """A trace file that cannot be read or is not a Kineto trace."""


class RuleError(PerfauditError):
    """A rule file that does not load or validate."""


class LaunchError(PerfauditError):
    """torchrun could not start the job (bad options, rendezvous failure): no rank ran the script."""

    exit_code = EXIT_SCRIPT_FAILED
