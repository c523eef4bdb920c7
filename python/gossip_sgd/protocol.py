"""The attach protocol's wire format (the C++ side is attach/protocol.h; docs/attach.md).

Every message is a 12-byte little-endian header (u32 magic "GSAT", u16 version, u16 type,
u32 payload_bytes) followed by its payload. Only control messages travel through the socket; the
parameters live in the memfd that WELCOME carries (SCM_RIGHTS).
"""

import struct

MAGIC = 0x54415347  # b"GSAT" read as a little-endian u32
VERSION = 3
MAX_PAYLOAD_BYTES = 64 * 1024

HEADER = struct.Struct("<IHHI")
HELLO = struct.Struct("<QII")  # num_params, dtype, flags
WELCOME = struct.Struct("<QIIQQQIIQII")  # num_params, dtype, flags, buffer_bytes, params_offset,
#                                          start_iteration, node_id, num_nodes, update_offset,
#                                          local_steps, reserved
ITERATION = struct.Struct("<Q")  # POST and MIXED
UPDATE = struct.Struct("<QfI")  # iteration, gamma, reserved
ERROR_CODE = struct.Struct("<I")  # then UTF-8 text

# Message types.
HELLO_TYPE, WELCOME_TYPE, POST_TYPE, MIXED_TYPE, ERROR_TYPE, BYE_TYPE, UPDATE_TYPE = range(1, 8)
TYPE_NAMES = {1: "HELLO", 2: "WELCOME", 3: "POST", 4: "MIXED", 5: "ERROR", 6: "BYE", 7: "UPDATE"}

# Element types; only float32 is accepted by gossipd.
DTYPES = {"float32": 1, "float64": 2, "float16": 3, "bfloat16": 4}

# ERROR codes.
ERROR_REFUSED, ERROR_PROTOCOL, ERROR_ABORTED = 1, 2, 3

# HELLO flags.
HELLO_UPDATE = 1  # the trainer sends UPDATE(t) after POST(t); the daemon subtracts gamma u_t

# WELCOME flags.
FLAG_BUFFER_INITIALIZED = 1


def encode(msg_type, payload=b"", version=VERSION):
    """One whole message: header and payload."""
    return HEADER.pack(MAGIC, version, msg_type, len(payload)) + payload


def encode_hello(num_params, dtype="float32", version=VERSION, flags=0):
    return encode(HELLO_TYPE, HELLO.pack(num_params, DTYPES[dtype], flags), version)


def encode_update(iteration, gamma):
    return encode(UPDATE_TYPE, UPDATE.pack(iteration, gamma, 0))


def encode_iteration(msg_type, iteration):
    return encode(msg_type, ITERATION.pack(iteration))


def encode_error(code, text):
    data = text.encode("utf-8")[: MAX_PAYLOAD_BYTES - ERROR_CODE.size]
    return encode(ERROR_TYPE, ERROR_CODE.pack(code) + data)
