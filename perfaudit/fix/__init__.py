"""Automatic fixes: the edits `perfaudit fix` makes to the user's source (and `perfaudit verify`
serves to an A/B run without touching the files). `catalog` is data (the rule schema reads it);
`plan` and `edits` need libcst, imported only when fixing."""
