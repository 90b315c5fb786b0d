"""Session layer: pick and start a launcher, plan the repository for what its server offers,
load variants on demand (`Deployment`, `ServedModel`).

Rule: imports `base`, `client`, `parity`, `repository`, `models` and `server`; never a front end.
"""
