"""What the planner is told: hardware facts, the GPU wiki, profiles and compile statistics, the
incumbent's facts, evidence and lessons from earlier attempts.
"""
