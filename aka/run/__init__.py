"""The run: the loop that drives a campaign, the supervisor's decisions, the run's records on disk,
standings, and promotion into git.
"""
