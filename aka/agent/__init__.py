"""Plan and Codegen: the plan record, the LLM backends and their prompts, the offline backend's
pattern search, and the user's LLM configuration.
"""
