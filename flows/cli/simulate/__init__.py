"""``gridshift simulate`` and ``gridshift simulate-sites``: ``trace`` (one trace, one site),
``sites`` (where+when vs when-only vs where-only) and ``_units`` (human units for their tables).
"""
