"""The integer path and query parameters of the routes, bounded: a number no row can hold is refused (422), never sent to the database.

Unbounded, a 23-digit job id reached SQLite, which raised ``OverflowError`` (a 500); PostgreSQL's 32-bit
INTEGER columns fail earlier still. The bound is the protocol's (:data:`grader.hosting.protocol.messages.ROW_NUMBER_MAX`),
the same that the bodies' attempt and try numbers are held to.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Path, Query

from grader.hosting.protocol.messages import ROW_NUMBER_MAX

#: A shard job's id in a route's path.
ShardJobId = Annotated[int, Path(ge=1, le=ROW_NUMBER_MAX, description="the shard job's id")]
#: The attempt a worker's request is about, as a query parameter.
AttemptQuery = Annotated[int, Query(ge=1, le=ROW_NUMBER_MAX, description="the attempt this worker holds")]
#: The try of a shard job a worker's request is about, as a query parameter.
TriesQuery = Annotated[int, Query(ge=1, le=ROW_NUMBER_MAX, description="the try of the shard job this worker holds")]
