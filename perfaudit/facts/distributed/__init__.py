"""Distributed jobs: DDP's setup, exposed communication, and several ranks compared."""
