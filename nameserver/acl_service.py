"""The nameserver's access-control calls (ACL 2.0): users, policies, logins, and
the check every signed write goes through.

Writes are authenticated once any user exists (``protocol.acl_signature``,
within the signature's skew of this node's clock): users and policies by a
super user, topics and consumer groups by a user allowed Create, Update or
Delete on them (brokers that auto-create sign as their
--acl-inner-user-file's user). While no user exists the cluster is open (ACL
off) and the first user may be created unsigned.

SHELL.
"""

from __future__ import annotations

from angelia_rpc import CallContext
from nameserver import commands as c
from nameserver.service_base import ServiceBase
from protocol import nameserver_api as api
from protocol.acl import Action, Forbidden, ResourceType, Unauthenticated, User, UserType
from protocol.acl_signature import DATE_TIME_HEADER, SKEW_MS_DEFAULT, Credential, verify
from protocol.acl_wire import acl_of, tables_response, user_of, user_type_of


class AclCalls(ServiceBase):
    """The ACL calls of ``NameserverService``, and the signed-write check the other
    calls make (:meth:`_authenticate_admin`)."""

    def _authenticate_admin(
        self,
        signed: api.SignedBy,
        action: Action | None = None,
        *resources: tuple[ResourceType, str],
    ) -> None:
        """Once any user exists, refuse a write not signed by a super user, or (given
        ``action`` and ``resources``) by a user whose policy allows it on every one."""
        user = self._signer(signed)
        if user is None:
            return  # no user yet: the cluster is open (ACL off); the first may be created
        tables = self.machine.state.acl_tables()
        if resources and action is not None:
            tables.check(user, resources, action)
        elif user.user_type is not UserType.SUPER:
            raise Forbidden(
                f"user {user.name!r} may not change users or policies: not a super user"
            )

    def _signer(self, signed: api.SignedBy) -> User | None:
        """The user whose valid signature ``signed`` is (None while no user exists);
        Unauthenticated if it is not one."""
        tables = self.machine.state.acl_tables()
        if not tables.users:
            return None
        if not signed.access_key:
            raise Unauthenticated("ACL is on: sign the request (rip5 admin --ak/--sk)")
        user = tables.user(signed.access_key)
        if user is None:
            raise Unauthenticated(f"user {signed.access_key!r} does not exist")
        credential = Credential(signed.access_key, (DATE_TIME_HEADER,), signed.signature)
        verify(credential, user.secret, signed.date_time, self.clock(), SKEW_MS_DEFAULT)
        return user

    async def authenticate(
        self, request: api.AuthenticateRequest, context: CallContext
    ) -> api.AuthenticateResponse:
        """Who signed ``request`` (a login); Unauthenticated if no user did."""
        user = self._signer(request.signed)
        if user is None:
            return api.AuthenticateResponse("", 0)
        return api.AuthenticateResponse(user.name, int(user.user_type))

    async def create_user(
        self, request: api.UserRequest, context: CallContext
    ) -> api.RevisionResponse:
        """Add a user."""
        self._authenticate_admin(request.signed)
        applied = await self.propose(c.CreateUser(user_of(request.user)))
        return api.RevisionResponse(applied.revision)

    async def update_user(
        self, request: api.UserRequest, context: CallContext
    ) -> api.RevisionResponse:
        """Change a user's secret and/or type ("" and 0 keep them)."""
        self._authenticate_admin(request.signed)
        info = request.user
        user_type = user_type_of(info.user_type) if info.user_type else None
        applied = await self.propose(c.UpdateUser(info.name, info.secret or None, user_type))
        return api.RevisionResponse(applied.revision)

    async def delete_user(
        self, request: api.UserRequest, context: CallContext
    ) -> api.RevisionResponse:
        """Remove a user and its policy."""
        self._authenticate_admin(request.signed)
        applied = await self.propose(c.DeleteUser(request.user.name))
        return api.RevisionResponse(applied.revision)

    async def create_acl(
        self, request: api.AclRequest, context: CallContext
    ) -> api.RevisionResponse:
        """Give a user its policy (refused if it has one)."""
        self._authenticate_admin(request.signed)
        acl = acl_of(request.acl)
        applied = await self.propose(c.PutAcl(acl.subject, acl.entries, create=True))
        return api.RevisionResponse(applied.revision)

    async def update_acl(
        self, request: api.AclRequest, context: CallContext
    ) -> api.RevisionResponse:
        """Add or replace entries of a user's policy, by resource."""
        self._authenticate_admin(request.signed)
        acl = acl_of(request.acl)
        applied = await self.propose(c.PutAcl(acl.subject, acl.entries))
        return api.RevisionResponse(applied.revision)

    async def delete_acl(
        self, request: api.AclRequest, context: CallContext
    ) -> api.RevisionResponse:
        """Remove the entries for the given resources (none: the whole policy)."""
        self._authenticate_admin(request.signed)
        acl = acl_of(request.acl)
        resources = tuple(entry.resource for entry in acl.entries)
        applied = await self.propose(c.DeleteAcl(acl.subject, resources))
        return api.RevisionResponse(applied.revision)

    async def acl_tables(
        self, request: api.AclTablesRequest, context: CallContext
    ) -> api.AclTablesResponse:
        """Every user and policy (linearizable); brokers cache them."""
        state = await self.linearizable()
        return tables_response(state.acl_tables(), state.revision)
