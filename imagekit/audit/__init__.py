"""The audit stage: a stdlib-only probe run inside an image (or on a GPU host), profiles as
data, the status decision, the vulnerability stage, and the runner that ties them together.
`imagekit.audit.stage.run(workspace, AuditRequest)` is its one entry point, as every stage's."""
