"""Signed attestations: the proof travels with the image, in the registry.

Modules, one per concept: keys (key files, imagekit's and cosign's), signer (the Signer
seam and the key-file signer), dsse (envelopes), statement (in-toto Statements v1),
cosign_tags (cosign's ``sha256-<hex>.att``/``.sig`` tags), attach (sign a statement and
store it in both forms: the cosign tag and an OCI 1.1 referrer), collect (read back and
verify), predicates (the predicate types imagekit writes), rules (a requirement's rule and
its time arithmetic, which the kinds build on). This is the plumbing below the kinds; the
gate that holds the kinds' verdicts to a policy (`imagekit verify`) is imagekit.gate, above
them, and a stage's own statement lives with the stage (imagekit.audit.attestation,
imagekit.mirror_binding, imagekit.pull_attestation).
"""
