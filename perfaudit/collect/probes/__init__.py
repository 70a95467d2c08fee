"""Probes: facts from the live process that a trace cannot show (DataLoader and optimizer settings,
DDP's options, dynamo's compiles, FLOPs counted, start-up samples, perfaudit's own cost, the machine)."""
