"""The gate: `imagekit verify` decides from the registry alone.

``policy`` is the policy file's model, built from the kinds' requirements; ``verify`` reads
an image's signed attestations (through imagekit.attest's collect) and holds them to it. It
sits above the kinds, which it reads, and the signing plumbing below them (imagekit.attest),
so every arrow between them points down.
"""
