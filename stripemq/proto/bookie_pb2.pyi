from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class AddEntryOp(_message.Message):
    __slots__ = ("request_id", "master_key", "entry", "recovery_add")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    MASTER_KEY_FIELD_NUMBER: _ClassVar[int]
    ENTRY_FIELD_NUMBER: _ClassVar[int]
    RECOVERY_ADD_FIELD_NUMBER: _ClassVar[int]
    request_id: int
    master_key: bytes
    entry: bytes
    recovery_add: bool
    def __init__(self, request_id: _Optional[int] = ..., master_key: _Optional[bytes] = ..., entry: _Optional[bytes] = ..., recovery_add: _Optional[bool] = ...) -> None: ...

class AddRequest(_message.Message):
    __slots__ = ("ops",)
    OPS_FIELD_NUMBER: _ClassVar[int]
    ops: _containers.RepeatedCompositeFieldContainer[AddEntryOp]
    def __init__(self, ops: _Optional[_Iterable[_Union[AddEntryOp, _Mapping]]] = ...) -> None: ...

class AddResult(_message.Message):
    __slots__ = ("request_id", "ledger_id", "entry_id", "code", "message")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    LEDGER_ID_FIELD_NUMBER: _ClassVar[int]
    ENTRY_ID_FIELD_NUMBER: _ClassVar[int]
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    request_id: int
    ledger_id: int
    entry_id: int
    code: int
    message: str
    def __init__(self, request_id: _Optional[int] = ..., ledger_id: _Optional[int] = ..., entry_id: _Optional[int] = ..., code: _Optional[int] = ..., message: _Optional[str] = ...) -> None: ...

class AddResponse(_message.Message):
    __slots__ = ("results",)
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[AddResult]
    def __init__(self, results: _Optional[_Iterable[_Union[AddResult, _Mapping]]] = ...) -> None: ...

class ReadRequest(_message.Message):
    __slots__ = ("ledger_id", "entry_id", "fence", "master_key", "long_poll_timeout_ms")
    LEDGER_ID_FIELD_NUMBER: _ClassVar[int]
    ENTRY_ID_FIELD_NUMBER: _ClassVar[int]
    FENCE_FIELD_NUMBER: _ClassVar[int]
    MASTER_KEY_FIELD_NUMBER: _ClassVar[int]
    LONG_POLL_TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    ledger_id: int
    entry_id: int
    fence: bool
    master_key: bytes
    long_poll_timeout_ms: int
    def __init__(self, ledger_id: _Optional[int] = ..., entry_id: _Optional[int] = ..., fence: _Optional[bool] = ..., master_key: _Optional[bytes] = ..., long_poll_timeout_ms: _Optional[int] = ...) -> None: ...

class ReadResponse(_message.Message):
    __slots__ = ("entry", "lac", "fenced")
    ENTRY_FIELD_NUMBER: _ClassVar[int]
    LAC_FIELD_NUMBER: _ClassVar[int]
    FENCED_FIELD_NUMBER: _ClassVar[int]
    entry: bytes
    lac: int
    fenced: bool
    def __init__(self, entry: _Optional[bytes] = ..., lac: _Optional[int] = ..., fenced: _Optional[bool] = ...) -> None: ...

class ReadEntriesRequest(_message.Message):
    __slots__ = ("ledger_id", "entry_ids", "max_bytes")
    LEDGER_ID_FIELD_NUMBER: _ClassVar[int]
    ENTRY_IDS_FIELD_NUMBER: _ClassVar[int]
    MAX_BYTES_FIELD_NUMBER: _ClassVar[int]
    ledger_id: int
    entry_ids: _containers.RepeatedScalarFieldContainer[int]
    max_bytes: int
    def __init__(self, ledger_id: _Optional[int] = ..., entry_ids: _Optional[_Iterable[int]] = ..., max_bytes: _Optional[int] = ...) -> None: ...

class ReadEntriesResponse(_message.Message):
    __slots__ = ("entries", "lac")
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    LAC_FIELD_NUMBER: _ClassVar[int]
    entries: _containers.RepeatedScalarFieldContainer[bytes]
    lac: int
    def __init__(self, entries: _Optional[_Iterable[bytes]] = ..., lac: _Optional[int] = ...) -> None: ...

class ReadLacRequest(_message.Message):
    __slots__ = ("ledger_id",)
    LEDGER_ID_FIELD_NUMBER: _ClassVar[int]
    ledger_id: int
    def __init__(self, ledger_id: _Optional[int] = ...) -> None: ...

class ReadLacResponse(_message.Message):
    __slots__ = ("lac", "last_entry_id", "fenced")
    LAC_FIELD_NUMBER: _ClassVar[int]
    LAST_ENTRY_ID_FIELD_NUMBER: _ClassVar[int]
    FENCED_FIELD_NUMBER: _ClassVar[int]
    lac: int
    last_entry_id: int
    fenced: bool
    def __init__(self, lac: _Optional[int] = ..., last_entry_id: _Optional[int] = ..., fenced: _Optional[bool] = ...) -> None: ...

class WriteLacRequest(_message.Message):
    __slots__ = ("ledger_id", "master_key", "lac")
    LEDGER_ID_FIELD_NUMBER: _ClassVar[int]
    MASTER_KEY_FIELD_NUMBER: _ClassVar[int]
    LAC_FIELD_NUMBER: _ClassVar[int]
    ledger_id: int
    master_key: bytes
    lac: int
    def __init__(self, ledger_id: _Optional[int] = ..., master_key: _Optional[bytes] = ..., lac: _Optional[int] = ...) -> None: ...

class WriteLacResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetInfoRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetInfoResponse(_message.Message):
    __slots__ = ("bookie_id", "read_only", "total_disk_bytes", "free_disk_bytes", "journal_fsyncs", "entries_added", "memtable_bytes", "rack", "binary_add_port")
    BOOKIE_ID_FIELD_NUMBER: _ClassVar[int]
    READ_ONLY_FIELD_NUMBER: _ClassVar[int]
    TOTAL_DISK_BYTES_FIELD_NUMBER: _ClassVar[int]
    FREE_DISK_BYTES_FIELD_NUMBER: _ClassVar[int]
    JOURNAL_FSYNCS_FIELD_NUMBER: _ClassVar[int]
    ENTRIES_ADDED_FIELD_NUMBER: _ClassVar[int]
    MEMTABLE_BYTES_FIELD_NUMBER: _ClassVar[int]
    RACK_FIELD_NUMBER: _ClassVar[int]
    BINARY_ADD_PORT_FIELD_NUMBER: _ClassVar[int]
    bookie_id: str
    read_only: bool
    total_disk_bytes: int
    free_disk_bytes: int
    journal_fsyncs: int
    entries_added: int
    memtable_bytes: int
    rack: str
    binary_add_port: int
    def __init__(self, bookie_id: _Optional[str] = ..., read_only: _Optional[bool] = ..., total_disk_bytes: _Optional[int] = ..., free_disk_bytes: _Optional[int] = ..., journal_fsyncs: _Optional[int] = ..., entries_added: _Optional[int] = ..., memtable_bytes: _Optional[int] = ..., rack: _Optional[str] = ..., binary_add_port: _Optional[int] = ...) -> None: ...
