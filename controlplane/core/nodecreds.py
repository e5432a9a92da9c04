"""Node report credentials: what a launched node presents when it reports a notice or a failed boot.

Nothing is stored: the control plane's report secret is derived from the admin token's hash
(``report_secret``), and a launch's credential is ``HMAC-SHA256(secret, "launch:" + intent id)``
(``node_credential``), rendered into the bootstrap of the instances of that launch. The API
recomputes it for the instance a report names (through the node row that holds the instance and
its launch intent) and compares in constant time, so a node can report only for the instances of
its own launch, never for another node's.
"""

from __future__ import annotations

import hashlib
import hmac

CREDENTIAL_PREFIX = "spn_"
_SECRET_LABEL = b"spotplane node report secret v1"


def report_secret(admin_token_hash: str) -> str:
    """The control plane's node report secret: ``HMAC-SHA256(admin token hash, label)``, hex."""
    return hmac.new(admin_token_hash.encode(), _SECRET_LABEL, hashlib.sha256).hexdigest()


def node_credential(secret: str, intent_id: str) -> str:
    """The report credential of one launch: ``spn_`` + ``HMAC-SHA256(secret, "launch:" + intent)``."""
    mac = hmac.new(secret.encode(), f"launch:{intent_id}".encode(), hashlib.sha256).hexdigest()
    return CREDENTIAL_PREFIX + mac


def credential_matches(secret: str, intent_id: str, presented: str | None) -> bool:
    """Whether ``presented`` is the launch's credential (constant-time comparison)."""
    if not presented or not secret or not intent_id:
        return False
    return hmac.compare_digest(node_credential(secret, intent_id).encode(), presented.encode())
