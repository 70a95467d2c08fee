"""perfaudit's built-in rules: one YAML file per rule (installed as the package `perfaudit.rules`)."""
