"""Logins of the dashboard when ACL is on (``rip5 dashboard --acl``).

A login is an ACL user's name and secret, checked by the nameserver: the
dashboard signs an ``authenticate`` call as the user (the admin's signature,
``protocol.acl_wire.signed_by``). The browser holds only a random session id,
in a cookie signed with a key drawn when the process starts (Starlette's
SessionMiddleware), so restarting the dashboard logs everyone out; the secret
stays in this process. Every change a page makes is then signed as the user,
and the nameserver decides with the user's policy.

SHELL.
"""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass

from protocol import nameserver_api as ns
from protocol.acl_wire import signed_by

SESSION_KEY = "login"
"""The field of the session cookie that holds the login's id."""


@dataclass(frozen=True, slots=True)
class Login:
    """A user logged in: its name (the access key) and secret."""

    user: str
    secret: str

    def signed(self) -> ns.SignedBy:
        """The signature of a request sent now as this user."""
        return signed_by(self.user, self.secret, int(time.time() * 1000))


class Logins:
    """The logins of this process, by random id."""

    def __init__(self) -> None:
        """No one logged in."""
        self._by_id: dict[str, Login] = {}

    def add(self, login: Login) -> str:
        """Remember ``login``; the id the session cookie carries."""
        login_id = secrets.token_urlsafe(24)
        self._by_id[login_id] = login
        return login_id

    def get(self, login_id: object) -> Login | None:
        """The login with ``login_id`` (None for an unknown or missing id)."""
        return self._by_id.get(login_id) if isinstance(login_id, str) else None

    def remove(self, login_id: object) -> None:
        """Forget a login (logout); an unknown id is ignored."""
        if isinstance(login_id, str):
            self._by_id.pop(login_id, None)
