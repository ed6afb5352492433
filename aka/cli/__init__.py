"""Typer command groups: each module parses, wires and prints; the logic lives in aka/."""
