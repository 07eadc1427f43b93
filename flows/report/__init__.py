"""The report room: what one run decided and saved, for people.

``chart`` (the run as a chart: a pure function of its report), ``svg`` (that chart as SVG text, for
the Prefect artifact), ``png`` (as a PNG, for ``gridshift report --plot``) and ``human`` (the report
as lines for a terminal).
"""
