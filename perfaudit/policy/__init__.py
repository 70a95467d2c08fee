"""What the team chose: the configuration (perfaudit.toml, pyproject.toml), suppressions in the code, the
baseline of accepted findings, and the gate that fails a build."""
