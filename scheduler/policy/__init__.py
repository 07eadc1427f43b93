"""The policy room: what a user writes, read and checked.

``types`` (the frozen pydantic models), ``loader`` (YAML text -> Policy, errors at file:line),
``schema`` (the JSON schema for editors), ``checks`` (what a schema cannot check), ``cron`` (the one
calendar), ``sites`` (the policy as seen at one site) and ``did_you_mean`` (suggestions for misspelt
names).
"""
