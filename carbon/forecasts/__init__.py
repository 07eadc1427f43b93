"""The forecasts room: every forecast of the grid signal, made, kept, scored and fused.

``builtin`` (forecasts for providers that publish none: pure series -> series), ``archive`` (every
forecast received or computed, in SQLite, joined with what was later observed), ``issued`` (what the
newest forecast said at a past instant), ``skill`` and ``scorecard`` (how good a forecast was for the
decision), ``fusion`` (several forecasts fused into one from their record).
"""
