"""The runner: the script in a child process, its run folder and what it left there, the options a run
is given, and the child of `verify` (the script timed as it is or with fixes in place)."""
