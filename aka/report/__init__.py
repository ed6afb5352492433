"""The last stage: what a run, a history or a nightly check tells its reader.

tables (the rows a report shows, computed from the records), html and plots (drawn from those rows
alone), regress (`aka regress`: the promoted kernels re-checked) and junit (its CI file).
"""
