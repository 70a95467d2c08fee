"""The audit inside the user's own process (framework callbacks, the notebook magic) and a notebook
read as the script `run` runs."""
