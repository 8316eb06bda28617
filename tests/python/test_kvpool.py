"""Python ctypes tests of kvpool's C ABI (standard library only).

Run by `cargo test` (tests/python_ctypes.rs) as

    KVPOOL_LIB=/abs/path/libkvpool.so python3 tests/python/test_kvpool.py -v

against a library built with `--features testing`. Expected indices follow from the header:
slot 0 / page 0 are never handed out; a token pool reuses freed slots first-in first-out; a
paged pool takes new pages from the front of its free list (initially 1, 2, 3, ...) and puts
freed pages back at the front.
"""

import ctypes
import os
import re
import sys
import threading
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import kvpool_ctypes as kvp  # noqa: E402

HEADER = os.path.normpath(os.path.join(HERE, os.pardir, os.pardir, "include", "kvpool.h"))

LIB = None


def setUpModule():
    global LIB
    path = os.environ.get("KVPOOL_LIB")
    if not path:
        raise RuntimeError("set KVPOOL_LIB to the path of libkvpool.so (built --features testing)")
    LIB = kvp.Library(path)
    if not LIB.has_testing:
        raise RuntimeError(f"{path} was not built with --features testing")


def read_header():
    with open(HEADER, encoding="utf-8") as f:
        return f.read()


def header_code():
    """The header without comments and preprocessor lines."""
    text = re.sub(r"/\*.*?\*/", " ", read_header(), flags=re.S)
    text = re.sub(r"//[^\n]*", " ", text)
    return "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))


def type_key(c_type):
    """'const struct kvp_pool  **' -> 'const struct kvp_pool * *'."""
    return " ".join(re.findall(r"\w+|\*", c_type))


def header_functions():
    """{name: (return type, [parameter types])} for every kvp_* function in the header."""
    functions = {}
    for statement in re.split(r"[;{}]", header_code()):
        statement = " ".join(statement.replace('extern "C"', " ").split())
        statement = statement.replace("KVP_NODISCARD", " ").strip()
        match = re.fullmatch(r"(.*?)\b(kvp_\w+)\s*\((.*)\)", statement)
        if not match:
            continue
        ret, name, params = match.groups()
        param_types = []
        if params.strip() != "void":
            for param in params.split(","):
                param_match = re.fullmatch(r"(.*?)\s*\b\w+", param.strip())
                param_types.append(type_key(param_match.group(1)))
        functions[name] = (type_key(ret), param_types)
    return functions


def header_structs():
    """{struct name: [(field type, field name)]} for the header's struct definitions."""
    structs = {}
    for name, body in re.findall(r"struct (kvp_\w+) \{(.*?)\};", header_code(), flags=re.S):
        structs[name] = [tuple(f.rsplit(None, 1)) for f in
                         (" ".join(s.split()) for s in body.split(";")) if f]
    return structs


# How each C type of the header must appear in the binding.
C_TO_CTYPES = {
    "void": None,
    "size_t": ctypes.c_size_t,
    "int32_t": ctypes.c_int32,
    "uint32_t": ctypes.c_uint32,
    "uint64_t": ctypes.c_uint64,
    "bool": ctypes.c_bool,
    "enum kvp_status": ctypes.c_int32,
    "const char *": ctypes.c_char_p,
    "char *": ctypes.c_char_p,
    "struct kvp_pool_config": kvp.PoolConfig,
    "const struct kvp_pool_config *": ctypes.POINTER(kvp.PoolConfig),
    "struct kvp_pool *": ctypes.c_void_p,
    "const struct kvp_pool *": ctypes.c_void_p,
    "struct kvp_pool * *": ctypes.POINTER(ctypes.c_void_p),
    "struct kvp_snapshot *": ctypes.c_void_p,
    "const struct kvp_snapshot *": ctypes.c_void_p,
    "struct kvp_snapshot * *": ctypes.POINTER(ctypes.c_void_p),
    "struct kvp_pool_info *": ctypes.POINTER(kvp.PoolInfo),
    "struct kvp_pool_stats *": ctypes.POINTER(kvp.PoolStats),
    "uint64_t *": ctypes.POINTER(ctypes.c_uint64),
    "const int64_t *": ctypes.POINTER(ctypes.c_int64),
    "void *": ctypes.c_void_p,
    "const void *": ctypes.c_void_p,
}


class KvpTestCase(unittest.TestCase):
    def assertKvpError(self, status_name, call, *args, message=None, **kwargs):
        """`call(*args)` raises KvpError `status_name` whose message contains `message`."""
        with self.assertRaises(kvp.KvpError) as ctx:
            call(*args, **kwargs)
        err = ctx.exception
        self.assertEqual(err.name, "KVP_STATUS_" + status_name, str(err))
        self.assertEqual(err.status, kvp.STATUS[status_name])
        self.assertEqual(err.description, LIB.status_str(err.status))
        self.assertTrue(err.message, "empty kvp_last_error_message")
        self.assertIn(err.name, str(err))
        self.assertIn(err.message, str(err))
        if message is not None:
            self.assertIn(message, err.message)
        return err

    def pool(self, size, page_size=1, **kwargs):
        pool = kvp.Pool(LIB, size, page_size, **kwargs)
        self.addCleanup(pool.close)
        return pool


class TestHeaderAndBinding(KvpTestCase):
    def test_header_is_parsed(self):
        functions = header_functions()
        self.assertGreaterEqual(len(functions), 20)
        self.assertEqual(functions["kvp_pool_new"],
                         ("enum kvp_status",
                          ["const struct kvp_pool_config *", "struct kvp_pool * *"]))
        self.assertEqual(functions["kvp_testing_panic"], ("enum kvp_status", []))

    def test_every_header_function_has_a_signature_and_vice_versa(self):
        functions = header_functions()
        self.assertEqual(sorted(functions), sorted(kvp.SIGNATURES))
        for name, (ret, params) in functions.items():
            with self.subTest(function=name):
                for c_type in [ret] + params:
                    self.assertIn(c_type, C_TO_CTYPES, f"{name}: unmapped C type {c_type!r}")
                restype, argtypes = kvp.SIGNATURES[name]
                self.assertIs(restype, C_TO_CTYPES[ret])
                self.assertEqual(len(argtypes), len(params))
                for i, (c_type, argtype) in enumerate(zip(params, argtypes)):
                    self.assertIs(argtype, C_TO_CTYPES[c_type], f"{name} parameter {i}")
                # and the loaded function really carries them
                fn = getattr(LIB, name)
                self.assertIs(fn, LIB.function(name))
                self.assertIs(fn.restype, restype)
                self.assertEqual(list(fn.argtypes), list(argtypes))

    def test_structs_match_header(self):
        structs = header_structs()
        for c_name, py in [("kvp_pool_config", kvp.PoolConfig), ("kvp_pool_info", kvp.PoolInfo),
                           ("kvp_pool_stats", kvp.PoolStats)]:
            with self.subTest(struct=c_name):
                fields = structs[c_name]
                self.assertEqual([n for _, n in fields], [n for n, _ in py._fields_])
                for (c_type, _), (_, ctype) in zip(fields, py._fields_):
                    self.assertIs(C_TO_CTYPES[c_type], ctype)

    def test_enums_match_header(self):
        code = header_code()
        statuses = {int(v): "KVP_STATUS_" + n for n, v in
                    re.findall(r"\bKVP_STATUS_(\w+) = (\d+)", code)}
        self.assertEqual(statuses, kvp.STATUS_NAMES)
        values = dict(re.findall(r"\b(KVP_(?:INDEX_TYPE|BACKEND)_\w+) = (\d+)", code))
        self.assertEqual(values, {"KVP_INDEX_TYPE_I64": str(kvp.INDEX_TYPE_I64),
                                  "KVP_INDEX_TYPE_I32": str(kvp.INDEX_TYPE_I32),
                                  "KVP_BACKEND_HOST": str(kvp.BACKEND_HOST),
                                  "KVP_BACKEND_CUDA": str(kvp.BACKEND_CUDA)})

    def test_version_matches_header(self):
        macros = dict(re.findall(r"#define (KVP_\w+_VERSION\w*|KVP_VERSION_\w+) (\d+)",
                                 read_header()))
        expected = "{}.{}.{}".format(macros["KVP_VERSION_MAJOR"], macros["KVP_VERSION_MINOR"],
                                     macros["KVP_VERSION_PATCH"])
        self.assertEqual(LIB.version(), expected)
        self.assertEqual(LIB.abi_version(), int(macros["KVP_ABI_VERSION"]))

    def test_status_str(self):
        texts = set()
        for number in kvp.STATUS_NAMES:
            text = LIB.status_str(number)
            self.assertTrue(text)
            self.assertNotEqual(text, "unknown status")
            texts.add(text)
        self.assertEqual(len(texts), len(kvp.STATUS_NAMES))
        for number in (-1, 11, 21, 43, 60, 99, 101, 2**31 - 1, -(2**31)):
            self.assertEqual(LIB.status_str(number), "unknown status")

    def test_config_default(self):
        cfg = LIB.config_default()
        self.assertEqual(cfg.as_dict(), {"size": 0, "page_size": 1,
                                         "index_type": kvp.INDEX_TYPE_I64,
                                         "backend": kvp.BACKEND_HOST, "device": 0,
                                         "need_sort": False})

    def test_library_path_is_absolute(self):
        self.assertTrue(os.path.isabs(LIB.path))


class TestTokenPool(KvpTestCase):
    def test_fifo_reuse(self):
        pool = self.pool(8)
        self.assertEqual(pool.alloc(3), [1, 2, 3])
        pool.free_indices([2, 1])
        self.assertEqual(pool.available_size(), 7)
        self.assertEqual(pool.alloc(6), [4, 5, 6, 7, 8, 2])
        self.assertEqual(pool.available_size(), 1)
        self.assertKvpError("OUT_OF_SLOTS", pool.alloc, 2, message="alloc")
        self.assertEqual(pool.available_size(), 1)
        self.assertEqual(pool.alloc(1), [1])
        self.assertEqual(pool.alloc(0), [])

    def test_extend_and_decode(self):
        pool = self.pool(8)
        self.assertEqual(pool.alloc(2), [1, 2])
        pool.free_indices([1])
        # extend on a token pool == alloc(extend_num_tokens); decode takes a slot per request
        self.assertEqual(pool.alloc_extend([0, 1], [2, 2], [-1, 2]), [3, 4, 5])
        self.assertEqual(pool.alloc_decode([3, 1], [5, -1]), [6, 7])
        self.assertEqual(pool.available_size(), 2)

    def test_clear(self):
        pool = self.pool(8)
        pool.alloc(5)
        pool.free_indices([3])
        pool.clear()
        self.assertEqual(pool.available_size(), 8)
        self.assertEqual(pool.alloc(8), [1, 2, 3, 4, 5, 6, 7, 8])

    def test_double_free(self):
        pool = self.pool(8)
        pool.alloc(3)
        pool.free_indices([1])
        self.assertKvpError("DOUBLE_FREE", pool.free_indices, [2, 1], message="indices[1]")
        self.assertKvpError("DOUBLE_FREE", pool.free_indices, [3, 3], message="indices[1]")
        self.assertEqual(pool.available_size(), 6)  # slots 2 and 3 were not freed
        pool.free_indices([3, 2])
        self.assertEqual(pool.available_size(), 8)


class TestPagedPool(KvpTestCase):
    def test_alloc_extend_worked_example(self):
        pool = self.pool(64, 4)
        self.assertEqual(pool.alloc_extend([0], [2], [-1]), [4, 5])
        self.assertEqual(pool.alloc_extend([2], [11], [5]), [6, 7, 8, 9, 10, 11, 12, 13, 14])
        self.assertEqual(pool.available_size(), 52)
        # a batch: new pages in batch order
        self.assertEqual(pool.alloc_extend([0, 0], [3, 5], [-1, -1]),
                         [16, 17, 18, 20, 21, 22, 23, 24])
        self.assertEqual(pool.available_size(), 40)

    def test_alloc_decode(self):
        pool = self.pool(64, 4)
        row = pool.alloc_extend([0], [3], [-1])
        self.assertEqual(row, [4, 5, 6])
        self.assertEqual(pool.alloc_decode([4], [6]), [7])  # fills page 1
        self.assertEqual(pool.alloc_decode([5, 1], [7, -1]), [8, 12])  # pages 2 and 3
        self.assertEqual(pool.available_size(), 52)

    def test_alloc_needs_page_multiples(self):
        pool = self.pool(32, 4)
        self.assertKvpError("UNALIGNED", pool.alloc, 6, message="page_size")
        self.assertEqual(pool.alloc(8), [4, 5, 6, 7, 8, 9, 10, 11])

    def test_free_indices_pages_and_segments(self):
        pool = self.pool(32, 4)
        self.assertEqual(pool.alloc(16), list(range(4, 20)))
        pool.free_indices([17, 9])  # pages 4 and 2, to the front ascending
        self.assertEqual(pool.alloc(8), [8, 9, 10, 11, 16, 17, 18, 19])
        pool.free_pages([3, 1])  # in the given order, not sorted
        self.assertEqual(pool.alloc(8), [12, 13, 14, 15, 4, 5, 6, 7])
        # a request row on pages 3, 1, 2; a segment ending inside page 2 frees all of it
        row = [12, 13, 14, 15, 4, 5, 6, 7, 8]
        self.assertKvpError("UNALIGNED", pool.free_segment, row, 2, 4)
        self.assertKvpError("BUFFER_TOO_SMALL", pool.free_segment, row, 4, 6)
        self.assertKvpError("INVALID_ARGUMENT", pool.free_segment, [12, 14, 13, 15], 0, 4,
                            message="row[1]")
        pool.free_segment(row, 4, 5)
        self.assertEqual(pool.available_size(), 24)
        self.assertEqual(pool.alloc(8), [4, 5, 6, 7, 8, 9, 10, 11])
        self.assertKvpError("DOUBLE_FREE", pool.free_pages, [5], message="page_ids[0]")

    def test_free_indices_returns_distinct_pages_ascending(self):
        pool = self.pool(32, 4)
        pool.alloc(20)  # pages 1..5
        pool.free_indices([9, 17, 5, 10])  # pages 2 4 1 2 -> 1 2 4 at the front
        self.assertEqual(pool.available_size(), 24)
        self.assertEqual(pool.alloc(16), [4, 5, 6, 7, 8, 9, 10, 11, 16, 17, 18, 19,
                                          24, 25, 26, 27])

    def test_invalid_inputs_change_nothing(self):
        pool = self.pool(64, 4)
        pool.alloc_extend([0], [6], [-1])  # 4..9 on pages 1, 2
        before = pool.stats()
        cases = [
            ("INVALID_LENGTHS", pool.alloc_extend, ([5], [3], [8]), "seq_lens[0]"),
            ("INVALID_LENGTHS", pool.alloc_extend, ([-1], [3], [-1]), "prefix_lens[0]"),
            ("LAST_LOC_MISMATCH", pool.alloc_extend, ([6], [7], [8]), "last_loc[0]"),
            ("LAST_LOC_MISMATCH", pool.alloc_extend, ([0], [1], [4]), "last_loc[0]"),
            ("NOT_ALLOCATED", pool.alloc_extend, ([1], [2], [12]), "last_loc[0]"),
            ("INDEX_OUT_OF_RANGE", pool.alloc_extend, ([1], [2], [68]), "last_loc[0]"),
            ("RESERVED_SLOT", pool.alloc_extend, ([1], [2], [0]), "last_loc[0]"),
            ("LAST_LOC_MISMATCH", pool.alloc_extend, ([6, 6], [7, 7], [9, 9]), "page 2"),
            ("OUT_OF_SLOTS", pool.alloc_extend, ([0], [64], [-1]), "free pages"),
            ("INVALID_LENGTHS", pool.alloc_decode, ([0], [-1]), "seq_lens[0]"),
            ("LAST_LOC_MISMATCH", pool.alloc_decode, ([7], [8]), "last_loc[0]"),
            ("RESERVED_SLOT", pool.free_indices, ([5, 0],), "indices[1]"),
            ("RESERVED_SLOT", pool.free_indices, ([3],), "indices[0]"),
            ("INDEX_OUT_OF_RANGE", pool.free_indices, ([68],), "indices[0]"),
            ("INDEX_OUT_OF_RANGE", pool.free_indices, ([-1],), "indices[0]"),
            ("RESERVED_SLOT", pool.free_pages, ([0],), "page_ids[0]"),
            ("INDEX_OUT_OF_RANGE", pool.free_pages, ([17],), "page_ids[0]"),
            ("DOUBLE_FREE", pool.free_indices, ([4, 4],), "indices[1]"),
            ("DOUBLE_FREE", pool.free_indices, ([12],), "indices[0]"),
        ]
        for status, call, args, needle in cases:
            with self.subTest(status=status, call=call.__name__, args=args):
                self.assertKvpError(status, call, *args, message=needle)
        self.assertKvpError("INVALID_LENGTHS", pool.alloc_extend, [0], [4], [-1],
                            extend_num_tokens=3, message="extend_num_tokens")
        self.assertKvpError("BUFFER_TOO_SMALL", pool.alloc_extend, [0], [4], [-1], out_len=3)
        self.assertKvpError("BUFFER_TOO_SMALL", pool.alloc_decode, [1, 1], [-1, -1], out_len=1)
        self.assertKvpError("BUFFER_TOO_SMALL", pool.alloc, 8, out_len=4)
        after = pool.stats()
        self.assertEqual(pool.available_size(), 56)
        self.assertEqual(after.tokens_allocated, before.tokens_allocated)
        self.assertEqual(after.tokens_freed, 0)
        self.assertEqual(after.failed_allocations, before.failed_allocations + 1)
        self.assertEqual(after.rejected_calls, before.rejected_calls + len(cases) - 1 + 4)
        # the request still continues in its page 2
        self.assertEqual(pool.alloc_extend([6], [8], [9]), [10, 11])


class TestFreeGroups(KvpTestCase):
    def test_group_holds_frees_until_end(self):
        pool = self.pool(32, 4)
        pool.alloc(24)  # pages 1..6
        self.assertKvpError("INVALID_STATE", pool.free_group_end, message="free group")
        with pool.free_group():
            self.assertTrue(pool.info().in_free_group)
            self.assertKvpError("INVALID_STATE", pool.free_group_begin, message="nest")
            pool.free_indices([24])  # page 6
            pool.free_pages([4, 1])
            pool.free_indices([8])  # page 2
            pool.free_segment([12, 13, 14, 15], 0, 4)  # page 3
            self.assertEqual(pool.available_size(), 8)
            self.assertEqual(pool.stats().pages_in_use, 6)
            self.assertKvpError("DOUBLE_FREE", pool.free_pages, [6], message="free group")
            self.assertKvpError("INVALID_STATE", pool.backup_state)
        self.assertFalse(pool.info().in_free_group)
        self.assertEqual(pool.available_size(), 28)
        # by index first (2 6, ascending), then page ids / segments in call order (4 1 3)
        self.assertEqual(pool.alloc(20), [16, 17, 18, 19, 4, 5, 6, 7, 12, 13, 14, 15,
                                          8, 9, 10, 11, 24, 25, 26, 27])
        self.assertKvpError("INVALID_STATE", pool.free_group_end)

    def test_clear_drops_the_group(self):
        pool = self.pool(16, 4)
        pool.alloc(8)
        pool.free_group_begin()
        pool.free_indices([4])
        pool.clear()
        self.assertFalse(pool.info().in_free_group)
        self.assertEqual(pool.available_size(), 16)
        self.assertKvpError("INVALID_STATE", pool.free_group_end)


class TestNeedSort(KvpTestCase):
    def test_staged_frees_merge_sorted(self):
        pool = self.pool(32, 4, need_sort=True)
        self.assertTrue(pool.info().need_sort)
        pool.alloc(32)
        pool.free_pages([6, 2, 4])
        self.assertEqual(pool.available_size(), 12)
        self.assertEqual(pool.stats().merges, 0)
        self.assertEqual(pool.alloc(8), [8, 9, 10, 11, 16, 17, 18, 19])
        self.assertEqual(pool.stats().merges, 1)
        pool.free_indices([9, 5])  # pages 2, 1
        pool.merge_and_sort_free()
        pool.merge_and_sort_free()  # nothing staged: no merge counted
        self.assertEqual(pool.stats().merges, 2)
        self.assertEqual(pool.alloc(12), [4, 5, 6, 7, 8, 9, 10, 11, 24, 25, 26, 27])


class TestSnapshots(KvpTestCase):
    def test_restore_reverts_allocs_and_frees(self):
        pool = self.pool(64, 4)
        pool.alloc(8)  # pages 1, 2
        with pool.backup_state() as snap:
            self.assertEqual(pool.alloc(4), [12, 13, 14, 15])
            pool.free_pages([1])
            pool.restore_state(snap)
            self.assertEqual(pool.available_size(), 56)
            self.assertKvpError("DOUBLE_FREE", pool.free_pages, [3])  # page 3 free again
            self.assertEqual(pool.alloc(4), [12, 13, 14, 15])
            pool.free_pages([1])  # page 1 allocated again
            pool.restore_state(snap)  # not consumed
            self.assertEqual(pool.available_size(), 56)
        self.assertTrue(snap.closed)
        self.assertEqual(pool.stats().restores, 2)

    def test_foreign_snapshot(self):
        pool = self.pool(64, 4)
        other = self.pool(64, 4)
        snap = other.backup_state()
        self.addCleanup(snap.close)
        pool.alloc(4)
        self.assertKvpError("FOREIGN_SNAPSHOT", pool.restore_state, snap, message="different")
        self.assertEqual(pool.available_size(), 60)
        other.close()  # the snapshot outlives its pool
        self.assertKvpError("FOREIGN_SNAPSHOT", pool.restore_state, snap)
        snap.close()


class TestInt32Pool(KvpTestCase):
    def test_int32_buffers(self):
        pool = self.pool(64, 4, index_type=kvp.INDEX_TYPE_I32)
        self.assertIs(pool.index_ctype, ctypes.c_int32)
        self.assertEqual(pool.info().index_type, kvp.INDEX_TYPE_I32)
        self.assertEqual(pool.alloc_extend([0], [2], [-1]), [4, 5])
        self.assertEqual(pool.alloc_extend([2], [11], [5]), list(range(6, 15)))
        self.assertEqual(pool.alloc_decode([12, 1], [14, -1]), [15, 16])
        self.assertEqual(pool.alloc(4), [20, 21, 22, 23])
        pool.free_indices([21, 16])
        self.assertKvpError("DOUBLE_FREE", pool.free_indices, [16])
        pool.free_pages([3])
        pool.free_segment([4, 5, 6, 7, 8, 9, 10], 0, 7)
        self.assertEqual(pool.available_size(), 64)
        self.assertEqual(pool.alloc(8), [4, 5, 6, 7, 8, 9, 10, 11])
        with self.assertRaises(OverflowError):
            pool.free_indices([2**31])  # would wrap to a negative int32

    def test_raw_int32_buffer_layout(self):
        # Through the raw function: exactly out_len int32 elements are written.
        pool = self.pool(16, 4, index_type=kvp.INDEX_TYPE_I32)
        buf = (ctypes.c_int32 * 6)(*([-7] * 6))
        LIB.check(LIB.kvp_pool_alloc(pool.handle, 4, buf, 4))
        self.assertEqual(list(buf), [4, 5, 6, 7, -7, -7])

    def test_default_pool_is_int64(self):
        pool = self.pool(8)
        self.assertIs(pool.index_ctype, ctypes.c_int64)
        pool.alloc(1)
        pool.free_indices([1])  # int64 buffers: no overflow for large values either
        self.assertKvpError("INDEX_OUT_OF_RANGE", pool.free_indices, [2**40])

    def test_int32_needs_a_small_pool(self):
        self.assertKvpError("INVALID_ARGUMENT", kvp.Pool, LIB, 2**31, 1,
                            index_type=kvp.INDEX_TYPE_I32)


class TestInfoAndStats(KvpTestCase):
    def test_info(self):
        pool = self.pool(64, 4)
        self.assertEqual(pool.info().as_dict(), {
            "size": 64, "kv_rows": 68, "padding_slot": 0, "page_size": 4, "num_pages": 16,
            "index_type": kvp.INDEX_TYPE_I64, "backend": kvp.BACKEND_HOST, "device": -1,
            "need_sort": False, "in_free_group": False})

    def test_stats(self):
        pool = self.pool(64, 4)
        self.assertTrue(all(v == 0 for v in pool.stats().as_dict().values()))
        pool.alloc(12)
        self.assertKvpError("UNALIGNED", pool.alloc, 5)
        self.assertKvpError("OUT_OF_SLOTS", pool.alloc, 64)
        pool.alloc_extend([0], [5], [-1])  # pages 4, 5
        pool.alloc_decode([6], [20])  # slot 21
        pool.free_indices([4, 9])  # pages 1, 2
        self.assertKvpError("DOUBLE_FREE", pool.free_pages, [1])
        with pool.backup_state() as snap:
            pool.restore_state(snap)
        self.assertEqual(pool.stats().as_dict(), {
            "alloc_calls": 3, "alloc_extend_calls": 1, "alloc_decode_calls": 1,
            "free_calls": 2, "tokens_allocated": 18, "tokens_freed": 8,
            "pages_allocated": 5, "pages_freed": 2, "pages_in_use": 3,
            "pages_in_use_peak": 5, "failed_allocations": 1, "rejected_calls": 2,
            "merges": 0, "restores": 1})


class TestErrorsAndConfig(KvpTestCase):
    def test_bad_configs(self):
        cases = [
            ("INVALID_ARGUMENT", dict(size=0), "size"),
            ("INVALID_ARGUMENT", dict(size=64, page_size=0), "page_size"),
            ("UNALIGNED", dict(size=10, page_size=4), "page_size"),
            ("INVALID_ARGUMENT", dict(size=64, index_type=2), "index_type"),
            ("INVALID_ARGUMENT", dict(size=64, backend=5), "backend"),
            ("UNSUPPORTED", dict(size=64, page_size=4, backend=kvp.BACKEND_CUDA), "CUDA"),
        ]
        for status, kwargs, needle in cases:
            with self.subTest(**kwargs):
                self.assertKvpError(status, kvp.Pool, LIB, message=needle, **kwargs)

    def test_null_arguments_through_the_raw_functions(self):
        pool = self.pool(16, 4)
        n = ctypes.c_uint64(99)
        self.assertEqual(LIB.kvp_pool_available_size(None, ctypes.byref(n)),
                         kvp.STATUS["NULL_ARGUMENT"])
        self.assertEqual(n.value, 99)
        self.assertEqual(LIB.kvp_pool_available_size(pool.handle, None),
                         kvp.STATUS["NULL_ARGUMENT"])
        self.assertEqual(LIB.kvp_pool_alloc(pool.handle, 4, None, 4),
                         kvp.STATUS["NULL_ARGUMENT"])
        self.assertIn("out", LIB.last_error_message())
        self.assertEqual(LIB.kvp_pool_free_indices(pool.handle, None, 0), 0)
        LIB.kvp_pool_free(None)
        LIB.kvp_snapshot_free(None)
        self.assertEqual(pool.available_size(), 16)

    def test_failed_calls_leave_out_parameters_alone(self):
        pool = self.pool(16, 4)
        out = ctypes.c_void_p(0x1234)
        cfg = LIB.config_default()  # size 0: invalid
        self.assertEqual(LIB.kvp_pool_new(ctypes.byref(cfg), ctypes.byref(out)),
                         kvp.STATUS["INVALID_ARGUMENT"])
        self.assertEqual(out.value, 0x1234)
        with pool.free_group():
            self.assertEqual(LIB.kvp_pool_backup_state(pool.handle, ctypes.byref(out)),
                             kvp.STATUS["INVALID_STATE"])
        self.assertEqual(out.value, 0x1234)

    def test_last_error_message_truncation(self):
        pool = self.pool(8)
        self.assertKvpError("RESERVED_SLOT", pool.free_indices, [0])
        full = LIB.last_error_message()
        n = LIB.kvp_last_error_message(None, 0)
        self.assertEqual(n, len(full.encode()))
        buf = ctypes.create_string_buffer(b"X" * 16, 16)
        self.assertEqual(LIB.kvp_last_error_message(buf, 5), n)
        self.assertEqual(buf.raw[:6], full.encode()[:4] + b"\0X")

    def test_closed_objects_refuse_use(self):
        pool = kvp.Pool(LIB, 8)
        snap = pool.backup_state()
        pool.close()
        with self.assertRaises(ValueError):
            pool.alloc(1)
        snap.close()
        with self.assertRaises(ValueError):
            snap.handle  # noqa: B018


class TestOwnership(KvpTestCase):
    def counting(self, name):
        calls = []
        original = LIB.function(name)

        def wrapper(handle):
            calls.append(handle)
            original(handle)

        setattr(LIB, name, wrapper)
        self.addCleanup(setattr, LIB, name, original)
        return calls

    def test_pool_and_snapshot_are_freed_exactly_once(self):
        pool_frees = self.counting("kvp_pool_free")
        snap_frees = self.counting("kvp_snapshot_free")
        pool = kvp.Pool(LIB, 16, 4)
        handle = pool.handle
        with pool.backup_state() as snap:
            snap_handle = snap.handle
        snap.close()
        self.assertEqual(snap_frees, [snap_handle])
        with pool:
            pool.alloc(4)
        pool.close()
        del pool
        self.assertEqual(pool_frees, [handle])

    def test_collected_pool_is_freed(self):
        pool_frees = self.counting("kvp_pool_free")
        pool = kvp.Pool(LIB, 16, 4)
        handle = pool.handle
        del pool
        import gc
        gc.collect()
        self.assertEqual(pool_frees, [handle])


class TestPanicBoundary(KvpTestCase):
    def test_panic_becomes_a_status(self):
        err = self.assertKvpError("PANIC", LIB.testing_panic)
        self.assertEqual(err.message, "internal panic: kvp_testing_panic")
        self.assertEqual(self.pool(8).alloc(2), [1, 2])  # still working

    def test_poisoned_pool(self):
        pool = kvp.Pool(LIB, 64, 4)
        healthy = self.pool(64, 4)
        pool.alloc(4)
        snap = pool.backup_state()
        self.addCleanup(snap.close)
        self.assertKvpError("PANIC", pool.testing_poison, message="kvp_testing_poison_pool")
        calls = [
            (pool.info, ()), (pool.available_size, ()), (pool.stats, ()), (pool.alloc, (4,)),
            (pool.alloc_extend, ([0], [1], [-1])), (pool.alloc_decode, ([1], [-1])),
            (pool.free_indices, ([4],)), (pool.free_pages, ([1],)),
            (pool.free_segment, ([4], 0, 1)), (pool.free_group_begin, ()),
            (pool.free_group_end, ()), (pool.merge_and_sort_free, ()), (pool.clear, ()),
            (pool.backup_state, ()), (pool.restore_state, (snap,)), (pool.testing_poison, ()),
        ]
        for call, args in calls:
            with self.subTest(call=call.__name__):
                self.assertKvpError("POISONED", call, *args, message="poisoned")
        self.assertEqual(healthy.alloc(4), [4, 5, 6, 7])
        pool.close()  # a poisoned pool is still freed normally
        self.assertTrue(pool.closed)


class TestRefusedCalls(KvpTestCase):
    def test_calls_refused_at_the_abi_boundary_are_counted(self):
        # kvp_pool_get_stats: alloc_calls / free_calls count "failed ones included", and
        # rejected_calls counts "calls refused for bad input", including a NULL buffer
        # refused before the call reaches the pool.
        pool = self.pool(16, 4)
        self.assertEqual(LIB.kvp_pool_alloc(pool.handle, 4, None, 4),
                         kvp.STATUS["NULL_ARGUMENT"])
        self.assertEqual(LIB.kvp_pool_free_indices(pool.handle, None, 2),
                         kvp.STATUS["NULL_ARGUMENT"])
        stats = pool.stats()
        self.assertEqual((stats.alloc_calls, stats.free_calls, stats.rejected_calls), (1, 1, 2))

    def test_token_pool_free_segment_message_names_the_row_element(self):
        # The message names the offending element of the row, as on a paged pool.
        pool = self.pool(8)
        pool.alloc(6)
        pool.free_indices([4])
        self.assertKvpError("DOUBLE_FREE", pool.free_segment, [1, 2, 3, 4, 5], 2, 2,
                            message="row[3]")


class TestThreads(KvpTestCase):
    def test_concurrent_alloc_and_free(self):
        """ctypes releases the GIL during calls, so these really overlap in the library."""
        pool = self.pool(1024, 4)
        held, lock, errors = set(), threading.Lock(), []

        def worker(t):
            try:
                for i in range(200):
                    n = 1 + (i * 5 + t) % 13
                    row = pool.alloc_extend([0], [n], [-1])
                    with lock:
                        for s in row:
                            if s in held:
                                errors.append(f"slot {s} handed out twice")
                            held.add(s)
                    if i % 10 == t:
                        try:
                            pool.free_indices([-(t + 1)])
                            errors.append("no error for a negative index")
                        except kvp.KvpError as e:
                            if f"= {-(t + 1)} " not in e.message:
                                errors.append(f"thread {t} got another thread's message: {e}")
                    with lock:
                        held.difference_update(row)
                    pool.free_segment(row, 0, len(row))
            except Exception as e:  # noqa: BLE001 - reported below
                errors.append(repr(e))

        threads = [threading.Thread(target=worker, args=(t,)) for t in range(6)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        self.assertEqual(errors, [])
        self.assertEqual(held, set())
        self.assertEqual(pool.available_size(), 1024)
        stats = pool.stats()
        self.assertEqual(stats.alloc_extend_calls, 6 * 200)
        self.assertEqual(stats.pages_in_use, 0)
        self.assertEqual(stats.rejected_calls, 6 * 20)


if __name__ == "__main__":
    unittest.main()
