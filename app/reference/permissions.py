"""The NATS permissions page, from the users ``troupe nats-config`` generates (``app.natsauth``)."""

from __future__ import annotations

from app.natsauth import users
from app.reference.markdown import block, code, header


def page() -> str:
    """``docs/reference/nats-permissions.md``."""
    lines = header("NATS permissions", "`app/natsauth.py`",
                   "With NATS users (the compose stack, `troupe nats-config`), each service connects as a user "
                   "of its own, whose password nats-server reads from `TROUPE_NATS_PASS_<USER>`. A user may "
                   "publish and subscribe only on the subjects listed; anonymous connections are refused. "
                   "`*` matches one token, `>` the rest. `$JS.API...` subjects are JetStream's API (stream "
                   "and consumer operations); `_INBOX.>` carries replies.")
    for user in users():
        lines += [f"## {user.name}", "", f"Password: {code('$' + user.password_variable)}.", "",
                  "Publish:", "", *block("\n".join(user.publish)), "Subscribe:", "", *block("\n".join(user.subscribe))]
    return "\n".join(lines)
