"""The profiler window and the session that opens it: where a step ends (hooks on optimizer steps,
backward, batches; a framework's own loop), which steps are steady, how much trace a step writes, what
the window exports."""
