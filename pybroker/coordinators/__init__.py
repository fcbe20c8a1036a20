"""Coordinators: state machines over internal topics (groups; later transactions)."""
