"""The layout of a node's facts, the tuple the fast whole-state check (`fast.py`) builds
once per node and the rules it calls read: (node, parent's last content, object,
pending?, then the fields below, then the node's id at `NID`)."""

from __future__ import annotations

from operator import attrgetter, itemgetter

DEV, DEV_EXP, HOST, HOST_EXP, DURABLE, DKEY, HKEY, BACKUP = range(4, 12)
NID = 12
GET_DEV, GET_DEV_EXP, GET_DURABLE, GET_DKEY, GET_HKEY, GET_BACKUP, GET_NID = (
    itemgetter(i) for i in (DEV, DEV_EXP, DURABLE, DKEY, HKEY, BACKUP, NID))
GET_PIN = attrgetter("pin")
