"""Flows: the commands that chain stages (doctor, pipeline, nightly).

A flow imports stages (build, audit, mirror, pull, the ledger); a stage never imports a flow.
"""
