"""Python tests of kvpool's C ABI through the ctypes package python/kvpool (standard
library only; the PyTorch tests run where torch is installed and are skipped elsewhere).

Run by `cargo test` (tests/python_ctypes.rs) as

    KVPOOL_LIB=/abs/path/libkvpool.so python3 tests/python/test_kvpool.py -v

against a library built with `--features testing`. Expected indices follow from the header:
slot 0 / page 0 are never handed out; a token pool reuses freed slots first-in first-out; a
paged pool takes new pages from the front of its free list (initially 1, 2, 3, ...) and puts
freed pages back at the front. Expected admission numbers follow SGLang's arithmetic
(SGLang's PrefillAdder and scheduler, as the header restates them): a request needs
extend + min(max_new_tokens, clip) + one page of room, running requests reserve
min(max_new - output, clip) x new_token_ratio, chunks are page-aligned.
"""

import array
import ctypes
import gc
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import types
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, os.pardir, os.pardir))
PYTHON_DIR = os.path.join(ROOT, "python")
sys.path.insert(0, PYTHON_DIR)

import kvpool as kvp  # noqa: E402

try:
    import torch
except (ImportError, OSError):  # not installed, or installed without its native libraries
    torch = None
try:
    import numpy
except ImportError:
    numpy = None

HEADER = os.path.join(ROOT, "include", "kvpool.h")

LIB = None

# SGLang's RETRACT_DECODE_STEPS (the header's KVP_RETRACT_DECODE_STEPS macro).
RETRACT_DECODE_STEPS = 20


def setUpModule():
    global LIB
    path = os.environ.get("KVPOOL_LIB")
    if not path:
        raise RuntimeError("set KVPOOL_LIB to the path of libkvpool.so (built --features testing)")
    LIB = kvp.load(path)  # the handle classes use the same one (kvp.load() reads KVPOOL_LIB)
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
        fields = []
        for field in (" ".join(s.split()) for s in body.split(";")):
            if field:
                c_type, field_name = re.fullmatch(r"(.*?)\s*\b(\w+)", field).groups()
                fields.append((type_key(c_type), field_name))
        structs[name] = fields
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
    "struct kvp_decode_reservation *": ctypes.c_void_p,
    "const struct kvp_decode_reservation *": ctypes.c_void_p,
    "struct kvp_decode_reservation * *": ctypes.POINTER(ctypes.c_void_p),
    "struct kvp_pool_info *": ctypes.POINTER(kvp.PoolInfo),
    "struct kvp_pool_stats *": ctypes.POINTER(kvp.PoolStats),
    "uint64_t *": ctypes.POINTER(ctypes.c_uint64),
    "const int64_t *": ctypes.POINTER(ctypes.c_int64),
    "int32_t *": ctypes.POINTER(ctypes.c_int32),
    "const struct kvp_req_table *": ctypes.POINTER(kvp.ReqTable),
    "void *": ctypes.c_void_p,
    "const void *": ctypes.c_void_p,
    "const void * *": ctypes.POINTER(ctypes.c_void_p),
    "const void * const *": ctypes.POINTER(ctypes.c_void_p),
    # device pools
    "struct CUstream_st *": ctypes.c_void_p,
    "bool *": ctypes.POINTER(ctypes.c_bool),
    "size_t *": ctypes.POINTER(ctypes.c_size_t),
    # admission objects
    "int64_t": ctypes.c_int64,
    "double": ctypes.c_double,
    "uint32_t *": ctypes.POINTER(ctypes.c_uint32),
    "const uint64_t *": ctypes.POINTER(ctypes.c_uint64),
    "struct kvp_scheduler_config": kvp.SchedulerConfig,
    "struct kvp_adder_config": kvp.AdderConfig,
    "struct kvp_delayer_config": kvp.DelayerConfig,
    "const struct kvp_scheduler_config *": ctypes.POINTER(kvp.SchedulerConfig),
    "struct kvp_scheduler *": ctypes.c_void_p,
    "const struct kvp_scheduler *": ctypes.c_void_p,
    "struct kvp_scheduler * *": ctypes.POINTER(ctypes.c_void_p),
    "const struct kvp_request *": ctypes.POINTER(kvp.Request),
    "struct kvp_submit_result *": ctypes.POINTER(kvp.SubmitResult),
    "struct kvp_step_plan *": ctypes.POINTER(kvp.StepPlanC),
    "struct kvp_finished *": ctypes.POINTER(kvp.Finished),
    "struct kvp_request_state *": ctypes.POINTER(kvp.RequestState),
    "struct kvp_scheduler_stats *": ctypes.POINTER(kvp.SchedulerStats),
    "const struct kvp_prefill_entry *": ctypes.POINTER(kvp.PrefillEntry),
    "const struct kvp_evicted *": ctypes.POINTER(kvp.Evicted),
    "const struct kvp_adder_config *": ctypes.POINTER(kvp.AdderConfig),
    "const struct kvp_running_request *": ctypes.POINTER(kvp.RunningRequest),
    "struct kvp_adder *": ctypes.c_void_p,
    "const struct kvp_adder *": ctypes.c_void_p,
    "struct kvp_adder * *": ctypes.POINTER(ctypes.c_void_p),
    "const struct kvp_candidate *": ctypes.POINTER(kvp.Candidate),
    "struct kvp_admission *": ctypes.POINTER(kvp.Admission),
    "struct kvp_budget *": ctypes.POINTER(kvp.Budget),
    "const struct kvp_delayer_config *": ctypes.POINTER(kvp.DelayerConfig),
    "struct kvp_delayer *": ctypes.c_void_p,
    "const struct kvp_delayer *": ctypes.c_void_p,
    "struct kvp_delayer * *": ctypes.POINTER(ctypes.c_void_p),
    "struct kvp_rank_info *": ctypes.POINTER(kvp.RankInfo),
    "const struct kvp_rank_info *": ctypes.POINTER(kvp.RankInfo),
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
        pool = kvp.Pool(size, page_size, **kwargs)
        self.addCleanup(pool.close)
        return pool

    def scheduler(self, pool=None, **config):
        sched = kvp.Scheduler(pool=pool, **config)
        self.addCleanup(sched.close)
        return sched

    def adder(self, available, evictable=0, running=(), chunked_in_flight=0, **config):
        adder = kvp.Adder(available, evictable, running, chunked_in_flight, **config)
        self.addCleanup(adder.close)
        return adder

    def delayer(self, **config):
        delayer = kvp.Delayer(**config)
        self.addCleanup(delayer.close)
        return delayer


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
        self.assertGreaterEqual(len(structs), 18)
        # every struct the header defines has a mirror, field for field
        self.assertEqual(sorted(structs), sorted(kvp.STRUCTS))
        for c_name, py in kvp.STRUCTS.items():
            with self.subTest(struct=c_name):
                fields = structs[c_name]
                self.assertEqual([n for _, n in fields], [n for n, _ in py._fields_])
                for (c_type, _), (_, ctype) in zip(fields, py._fields_):
                    self.assertIn(c_type, C_TO_CTYPES, f"{c_name}: unmapped C type {c_type!r}")
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
        # every enum of the header, constant for constant
        enums = {name: {c: int(v) for c, v in re.findall(r"\b(KVP_\w+) = (\d+)", body)}
                 for name, body in re.findall(r"enum (kvp_\w+)[^;{]*\{(.*?)\}", code,
                                              flags=re.S)}
        self.assertEqual(len(enums), 10, sorted(enums))
        self.assertEqual(enums, kvp.ENUMS)
        self.assertEqual(kvp.STEP_KIND_NAMES, {0: "IDLE", 1: "PREFILL", 2: "DECODE"})
        self.assertEqual(kvp.DELAY_VERDICT_NAMES[kvp.DELAY_VERDICT_WAIT_TIMEOUT],
                         "WAIT_TIMEOUT")

    def test_constants_match_header(self):
        macros = dict(re.findall(r"#define (\w+) (\d+)", read_header()))
        self.assertEqual(macros["KVP_CLIP_MAX_NEW_TOKENS"], "4096")
        self.assertEqual(macros["KVP_RETRACT_DECODE_STEPS"], str(RETRACT_DECODE_STEPS))
        self.assertEqual(macros["KVP_MAX_RESERVED_STEPS"], str(kvp.MAX_RESERVED_STEPS))

    def test_version_matches_header(self):
        macros = dict(re.findall(r"#define (KVP_\w+_VERSION\w*|KVP_VERSION_\w+) (\d+)",
                                 read_header()))
        expected = "{}.{}.{}".format(macros["KVP_VERSION_MAJOR"], macros["KVP_VERSION_MINOR"],
                                     macros["KVP_VERSION_PATCH"])
        self.assertEqual(LIB.version(), expected)
        self.assertEqual(LIB.abi_version(), int(macros["KVP_ABI_VERSION"]))
        self.assertEqual(kvp.ABI_VERSION, int(macros["KVP_ABI_VERSION"]))

    def test_package_version_is_the_crate_s(self):
        """kvpool.__version__ (the wheel's version, pyproject.toml) is Cargo.toml's, which
        build.rs also puts in the header."""
        with open(os.path.join(ROOT, "Cargo.toml"), encoding="utf-8") as f:
            crate = re.search(r'^version = "([^"]+)"', f.read(), re.M).group(1)
        self.assertEqual(kvp.__version__, crate)
        self.assertEqual(LIB.version(), crate)
        with open(os.path.join(ROOT, "pyproject.toml"), encoding="utf-8") as f:
            project = f.read()
        self.assertIn('version = { attr = "kvpool.__version__" }', project)

    def test_status_str(self):
        texts = set()
        for number in kvp.STATUS_NAMES:
            text = LIB.status_str(number)
            self.assertTrue(text)
            self.assertNotEqual(text, "unknown status")
            texts.add(text)
        self.assertEqual(len(texts), len(kvp.STATUS_NAMES))
        for number in (-1, 11, 22, 44, 59, 65, 99, 101, 2**31 - 1, -(2**31)):
            self.assertEqual(LIB.status_str(number), "unknown status")

    def test_status_str_refuses_a_number_that_is_no_int32(self):
        # ctypes wrapped it: 2**32 + 8 was described as status 8, "double free"
        for number in (2**32 + 8, -(2**32) + 8, 2**31, -(2**31) - 1):
            with self.subTest(number=number):
                with self.assertRaises(OverflowError) as ctx:
                    LIB.status_str(number)
                self.assertIn(f"status = {number} is out of range for int32_t",
                              str(ctx.exception))

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

    def test_stale_last_loc_refused_and_rewind(self):
        pool = self.pool(64, 4)
        self.assertEqual(pool.alloc_extend([0], [1], [-1]), [4])
        self.assertEqual(pool.alloc_extend([1], [2], [4]), [5])  # continues page 1
        self.assertKvpError("LAST_LOC_MISMATCH", pool.alloc_decode, [2], [4],
                            message="is not where page 1 was left")
        pool.rewind([4])  # slot 5 rejected: page 1 ends at slot 4 again
        self.assertEqual(pool.alloc_decode([2], [4]), [5])
        self.assertKvpError("LAST_LOC_MISMATCH", pool.rewind, [6], message="never handed out")

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
        self.assertEqual(after.slots_freed, 0)
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


class TestNeedQueries(KvpTestCase):
    def test_extend_and_decode_need(self):
        pool = self.pool(64, 4)
        # prefix 2 -> 11: its first 2 tokens finish the prefix's page, then 2 new pages
        self.assertEqual(pool.extend_need([2, 0], [11, 3]), (3, 12))
        self.assertEqual(pool.extend_need([2, 0], [11, 3]).pages, 3)
        self.assertEqual(pool.extend_need(array.array("q", []), []), kvp.ExtendNeed(0, 0))
        self.assertEqual(pool.decode_need(array.array("q", [1, 2, 5, 8, 9])), 3)
        self.assertKvpError("INVALID_LENGTHS", pool.extend_need, [5], [4],
                            message="seq_lens[0] = 4 is less than prefix_lens[0] = 5")
        self.assertKvpError("INVALID_LENGTHS", pool.decode_need, [3, 0],
                            message="seq_lens[1] = 0")
        with self.assertRaises(ValueError):
            pool.extend_need([0, 0], [1])
        stats = pool.stats()
        self.assertEqual((stats.alloc_extend_calls, stats.rejected_calls), (0, 0))
        self.assertEqual(pool.available_size(), 64)

    def test_need_predicts_shortage_with_staged_pages(self):
        pool = self.pool(32, 4, need_sort=True)
        row = pool.alloc_extend([0], [24], [-1])  # 6 of 8 pages
        pool.free_segment(row, 0, 24)  # staged
        self.assertEqual(pool.available_size(), 32)
        rng = random.Random(11)
        for _ in range(200):
            lens = [rng.randrange(0, 20) for _ in range(rng.randrange(1, 4))]
            pages, tokens = pool.extend_need([0] * len(lens), lens)
            available = pool.available_size()
            if pages * 4 > available:
                self.assertKvpError("OUT_OF_SLOTS", pool.alloc_extend, [0] * len(lens), lens,
                                    [-1] * len(lens))
            else:
                got = pool.alloc_extend([0] * len(lens), lens, [-1] * len(lens), tokens)
                self.assertEqual(len(got), tokens)
                self.assertEqual(pool.available_size(), available - pages * 4)
                pool.free_indices(got)  # staged again
        self.assertGreater(pool.stats().merges, 1)
        self.assertGreater(pool.stats().failed_allocations, 0)


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
        self.assertKvpError("INVALID_ARGUMENT", kvp.Pool, 2**31, 1,
                            index_type=kvp.INDEX_TYPE_I32)


class TestBeyondThePool(KvpTestCase):
    def test_alloc_beyond_the_pool_makes_no_output(self):
        # More slots than the pool has: OUT_OF_SLOTS before an output of that length is made
        # (10**12 indices would not fit in memory), as kvpool.hpp's allocating overload
        # does; the library is not called, so nothing changes, not even the merge that a
        # refused call's shortage makes.
        pool = self.pool(32, 4, need_sort=True)
        pool.alloc(32)
        pool.free_pages([6, 2])
        before = pool.stats().as_dict()
        for n in (36, 10**12):
            self.assertKvpError("OUT_OF_SLOTS", pool.alloc, n,
                                message=f"{n} tokens need more than the pool's 32 slots")
        self.assertEqual(pool.stats().as_dict(), before)
        self.assertEqual(pool.available_size(), 8)
        # Given the output's length, the library is called and judges it.
        self.assertKvpError("BUFFER_TOO_SMALL", pool.alloc, 36, out_len=4)
        # A count the pool could hold goes to the library: short, after its merge.
        self.assertKvpError("OUT_OF_SLOTS", pool.alloc, 32, message="free pages")
        self.assertEqual(pool.stats().merges, 1)


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
            "free_calls": 2, "tokens_allocated": 18, "slots_freed": 8,
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
            # no driver, or a driver without device 999: the same status either way
            ("CUDA_UNAVAILABLE", dict(size=64, page_size=4, backend=kvp.BACKEND_CUDA,
                                      device=999), None),
        ]
        for status, kwargs, needle in cases:
            with self.subTest(**kwargs):
                self.assertKvpError(status, kvp.Pool, message=needle, **kwargs)
        with self.assertRaises(ValueError) as ctx:
            kvp.Pool(64, backend="tpu")  # a backend name the binding does not know
        self.assertIn("'host' or 'cuda'", str(ctx.exception))
        self.assertKvpError("CUDA_UNAVAILABLE", kvp.Pool, 64, backend="cuda", device=999)

    def test_a_backend_that_is_no_integer_is_refused_not_truncated(self):
        # int(backend) truncated: backend=0.5 made a host pool, 1.9 asked for a CUDA one
        calls = spy_calls(self, ["kvp_pool_new"])
        for backend in (0.5, 1.9, 1.0):
            with self.subTest(backend=backend):
                with self.assertRaises(TypeError) as ctx:
                    kvp.Pool(64, 4, backend=backend)
                self.assertIn("backend", str(ctx.exception))
        self.assertEqual(calls, [])

        class Host:
            def __index__(self):
                return kvp.BACKEND_HOST

        with kvp.Pool(64, 4, backend=Host()) as pool:  # an integer by __index__: taken
            self.assertEqual(pool.backend, kvp.BACKEND_HOST)

    def test_errors_survive_pickling_and_copying(self):
        # A worker process's KvpError reaches its parent pickled; it could not be rebuilt
        # (KvpError.__init__ takes four arguments, Exception.__reduce__ gave it one).
        import copy
        import pickle
        pool = self.pool(64, 4)
        err = self.assertKvpError("DOUBLE_FREE", pool.free_indices, [4])
        for again in (pickle.loads(pickle.dumps(err)), copy.copy(err)):
            self.assertIsInstance(again, kvp.KvpError)
            self.assertEqual((again.status, again.name, again.description, again.message,
                              str(again)),
                             (err.status, err.name, err.description, err.message, str(err)))

    def test_device_calls_on_a_host_pool(self):
        """The *_async calls are refused on a host pool with WRONG_BACKEND: by the library
        (calls without buffers, stream NULL), or by the binding before it forms a pointer
        (calls with device buffers). No torch and no GPU needed."""
        pool = self.pool(64, 4, backend="host")
        self.assertFalse(pool.is_device)
        self.assertIsNone(pool.device)
        pool.alloc(8)
        for call, args in [
            (pool.clear_async, ()),
            (pool.merge_and_sort_free_async, ()),
            (pool.backup_state_async, ()),
        ]:
            with self.subTest(call=call.__name__):
                self.assertKvpError("WRONG_BACKEND", call, *args)
        with pool.free_group():  # open, so that only the backend is wrong
            self.assertKvpError("WRONG_BACKEND", pool.free_group_end_async)
        with pool.backup_state() as snap:
            self.assertKvpError("WRONG_BACKEND", pool.restore_state_async, snap)
        for call, args, host_name in [
            (pool.alloc_async, (4,), "alloc()"),
            (pool.alloc_extend_async, ([0], [4], [-1]), "alloc_extend()"),
            (pool.alloc_decode_async, ([5], [4]), "alloc_decode()"),
            (pool.free_async, ([4],), "free_indices()"),
            (pool.free_pages_async, ([1],), "free_pages()"),
            (pool.free_segment_async, ([4, 5], 0, 2), "free_segment()"),
        ]:
            with self.subTest(call=call.__name__):
                self.assertKvpError("WRONG_BACKEND", call, *args, message=host_name)
        self.assertEqual(pool.available_size(), 56)  # nothing changed

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
        pool = kvp.Pool(8)
        snap = pool.backup_state()
        pool.close()
        with self.assertRaises(ValueError):
            pool.alloc(1)
        snap.close()
        with self.assertRaises(ValueError):
            snap.handle  # noqa: B018


def count_calls(test, name):
    """Wraps the library function `name` for the rest of `test`; returns the list of handles
    it is called with."""
    calls = []
    original = LIB.function(name)

    def wrapper(handle):
        calls.append(handle)
        original(handle)

    setattr(LIB, name, wrapper)
    test.addCleanup(setattr, LIB, name, original)
    return calls


class TestOwnership(KvpTestCase):
    def test_pool_and_snapshot_are_freed_exactly_once(self):
        pool_frees = count_calls(self, "kvp_pool_free")
        snap_frees = count_calls(self, "kvp_snapshot_free")
        pool = kvp.Pool(16, 4)
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
        pool_frees = count_calls(self, "kvp_pool_free")
        pool = kvp.Pool(16, 4)
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
        pool = kvp.Pool(64, 4)
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


class TestConfigDefaults(KvpTestCase):
    def test_adder_and_delayer_defaults_are_sglangs(self):
        a = LIB.kvp_adder_config_default()
        self.assertEqual((a.page_size, a.max_prefill_tokens, a.chunked_prefill_size,
                          a.clip_max_new_tokens, a.max_chunked_requests), (1, 16384, 8192, 4096, 1))
        self.assertAlmostEqual(a.new_token_ratio, 0.7)
        d = LIB.kvp_delayer_config_default()
        self.assertEqual((d.max_delay_passes, d.max_running_requests), (30, 0))
        self.assertLess(d.token_usage_low_watermark, 0)


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


# ---- admission: kvp_scheduler, kvp_adder, kvp_delayer ----------------------------------------


def retraction_ratio(outputs, max_new_tokens):
    """SGLang's estimate after a retraction, over the requests that stay:
    min(1, (sum(output_len) + RETRACT_DECODE_STEPS * n) / (sum(max_new_tokens) + 1))."""
    n = len(outputs)
    return min(1.0, (sum(outputs) + RETRACT_DECODE_STEPS * n) / (sum(max_new_tokens) + 1))


RATIO_INIT = 0.7
RATIO_MIN = 0.7 * 0.14
RATIO_DECAY = (RATIO_INIT - RATIO_MIN) / 600


class Engine:
    """What an engine does around kvp_scheduler_step, with a real pool: one slot row per
    request, the KV of retracted / preempted / aborted requests freed, one alloc_extend for
    the prefill entries and one alloc_decode for the decode rows. After every step each live
    request's kv_len must equal its row's length and its output_len the engine's count."""

    def __init__(self, test, pool, sched):
        self.test, self.pool, self.sched = test, pool, sched
        self.rows = {}  # id -> [slot, ...]: the request's req_to_token row
        self.outputs = {}  # id -> tokens generated, as the engine counts them
        self.aborted = []
        self.plans = []

    def submit(self, id, input_len, max_new_tokens, **kwargs):
        result = self.sched.submit(id, input_len, max_new_tokens, **kwargs)
        if result.queued:
            self.rows[id] = []
            self.outputs[id] = kwargs.get("output_len", 0)
        return result

    def free_row(self, id):
        row = self.rows[id]
        if row:
            self.pool.free_indices(row)
        self.rows[id] = []

    def step(self, available=0, evictable=0, allow_prefill=True):
        t = self.test
        plan = self.sched.step(available, evictable, allow_prefill)
        self.plans.append(plan)
        for e in plan.evicted:
            t.assertEqual(e.kv_len, len(self.rows[e.id]), f"evicted {e} (plan {plan})")
            self.free_row(e.id)
        for e in plan.aborted:
            del self.rows[e.id], self.outputs[e.id]
            self.aborted.append(e.id)
        if plan.prefill:
            t.assertEqual(plan.kind, kvp.STEP_KIND_PREFILL)
            prefix_lens, seq_lens, last_loc = [], [], []
            for e in plan.prefill:
                row = self.rows[e.id]
                t.assertEqual(e.prefix_len, len(row), f"{e}: prefix_len is not the row length")
                t.assertGreater(e.extend_len, 0)
                prefix_lens.append(e.prefix_len)
                seq_lens.append(e.prefix_len + e.extend_len)
                last_loc.append(row[-1] if row else -1)
            slots = self.pool.alloc_extend(prefix_lens, seq_lens, last_loc)
            at = 0
            for e in plan.prefill:
                self.rows[e.id].extend(slots[at:at + e.extend_len])
                at += e.extend_len
                if not e.chunked:
                    self.outputs[e.id] += 1  # the prefill's last position yields a token
        if plan.decode:
            ids = plan.decode
            seq_lens = [len(self.rows[i]) + 1 for i in ids]
            slots = self.pool.alloc_decode(seq_lens, [self.rows[i][-1] for i in ids])
            for i, slot in zip(ids, slots):
                self.rows[i].append(slot)
                self.outputs[i] += 1
        self.check_rows()
        return plan

    def check_rows(self):
        for id, row in self.rows.items():
            state = self.sched.request(id)
            self.test.assertEqual((state.kv_len, state.output_len),
                                  (len(row), self.outputs[id]), f"request {id}")
            if state.phase == kvp.PHASE_WAITING:
                self.test.assertEqual(row, [], f"waiting request {id} holds KV")

    def finish(self, id):
        kv_len = self.sched.finish(id)
        self.test.assertEqual(kv_len, len(self.rows[id]))
        self.free_row(id)
        del self.rows[id], self.outputs[id]


class TestSchedulerConfig(KvpTestCase):
    def test_overrides_leave_the_given_config_as_it_was(self):
        """``Scheduler(config=cfg, **overrides)`` and ``Adder(config=cfg, ...)`` apply the
        overrides to a copy: one config can seed several objects."""
        cfg = LIB.kvp_scheduler_config_default()
        cfg.capacity = 64
        sched = kvp.Scheduler(config=cfg, lib=LIB, chunked_prefill_size=16)
        self.assertEqual((cfg.chunked_prefill_size, sched.config.chunked_prefill_size),
                         (8192, 16))
        self.assertIs(kvp.Scheduler(config=cfg, lib=LIB).config, cfg)  # no overrides: as given
        adder_cfg = kvp.AdderConfig.sglang_defaults(1)
        adder = kvp.Adder(1000, config=adder_cfg, lib=LIB, chunked_prefill_size=32)
        self.assertEqual((adder_cfg.chunked_prefill_size, adder.config.chunked_prefill_size),
                         (kvp.AdderConfig.sglang_defaults(1).chunked_prefill_size, 32))

    def test_config_default(self):
        cfg = LIB.kvp_scheduler_config_default()
        self.assertEqual(cfg.as_dict(), {
            "capacity": 0, "page_size": 1, "max_prefill_tokens": 16384,
            "chunked_prefill_size": 8192, "clip_max_new_tokens": 4096,
            "truncation_align_size": 0, "prefill_max_requests": 0, "max_running_requests": 0,
            "max_chunked_requests": 1, "policy": kvp.POLICY_FCFS,
            "retraction": kvp.RETRACTION_LENGTH, "policy_seed": 0, "enable_priority": False,
            "low_priority_values_first": False, "preemption_threshold": 10,
            "enable_mixed_chunk": False, "prefix_cache_disabled": False,
            "init_new_token_ratio": 0.7, "min_new_token_ratio_factor": 0.14,
            "new_token_ratio_decay_steps": 600, "schedule_conservativeness": 1.0,
            "dynamic_chunk_a": 0.0, "dynamic_chunk_b": 0.0, "dynamic_chunk_context_len": 0})

    def test_bad_configs(self):
        cases = [
            ("INVALID_ARGUMENT", dict(capacity=0), "capacity"),
            ("INVALID_ARGUMENT", dict(capacity=64, page_size=0), "page_size"),
            ("INVALID_ARGUMENT", dict(capacity=64, policy=5), "policy"),
            ("INVALID_ARGUMENT", dict(capacity=64, retraction=2), "retraction"),
            ("INVALID_ARGUMENT", dict(capacity=64, chunked_prefill_size=100,
                                      truncation_align_size=256), "truncation_align_size"),
            ("INVALID_ARGUMENT", dict(capacity=64, max_chunked_requests=0),
             "max_chunked_requests"),
            ("INVALID_ARGUMENT", dict(capacity=64, init_new_token_ratio=float("nan")), "ratio"),
            ("INVALID_ARGUMENT", dict(capacity=64, schedule_conservativeness=-1.0), "ratio"),
            ("INVALID_ARGUMENT", dict(capacity=64, new_token_ratio_decay_steps=0), "decay"),
        ]
        for status, kwargs, needle in cases:
            with self.subTest(**{k: str(v) for k, v in kwargs.items()}):
                self.assertKvpError(status, kvp.Scheduler, message=needle, **kwargs)
        with self.assertRaises(TypeError):
            kvp.Scheduler(capacity=64, chunk_size=5)  # a typo is not ignored

    def test_new_null_arguments_leave_out_alone(self):
        out = ctypes.c_void_p(0x1234)
        cfg = LIB.kvp_scheduler_config_default()
        self.assertEqual(LIB.kvp_scheduler_new(None, None, ctypes.byref(out)),
                         kvp.STATUS["NULL_ARGUMENT"])
        self.assertIn("config", LIB.last_error_message())
        cfg.capacity = 64
        self.assertEqual(LIB.kvp_scheduler_new(ctypes.byref(cfg), None, None),
                         kvp.STATUS["NULL_ARGUMENT"])
        self.assertIn("out_scheduler", LIB.last_error_message())
        cfg.capacity = 0
        self.assertEqual(LIB.kvp_scheduler_new(ctypes.byref(cfg), None, ctypes.byref(out)),
                         kvp.STATUS["INVALID_ARGUMENT"])
        self.assertEqual(out.value, 0x1234)
        LIB.kvp_scheduler_free(None)
        LIB.kvp_adder_free(None)
        LIB.kvp_delayer_free(None)

    def test_attached_scheduler_takes_capacity_and_page_size_from_the_pool(self):
        pool = self.pool(64, 16)
        # capacity / page_size of the config are ignored (even invalid ones)
        sched = self.scheduler(pool, capacity=0, page_size=0)
        # needed = 40 + min(10, 4096) + one 16-token page = 66 >= 64
        result = sched.submit(1, input_len=40, max_new_tokens=10)
        self.assertEqual((result.queued, result.needed, result.capacity), (False, 66, 64))
        self.assertTrue(sched.submit(2, input_len=30, max_new_tokens=10).queued)

    def test_poisoned_pool(self):
        pool = self.pool(64, 16)
        sched = self.scheduler(pool)
        sched.submit(1, 10, 5)
        self.assertKvpError("PANIC", pool.testing_poison)
        self.assertKvpError("POISONED", sched.step, message="poisoned")
        self.assertEqual(sched.stats().steps, 0)
        self.assertKvpError("POISONED", kvp.Scheduler, pool=pool)


class TestScheduler(KvpTestCase):
    def test_seed_example_10000_tokens_chunked_4096_4096_1808_then_decode(self):
        # The seed article: a 10,000-token prompt with chunked_prefill_size 4096 is prefilled
        # as chunks of 4096, 4096 and 1808 tokens, then decodes. A real pool is attached.
        pool = self.pool(1_000_000, 1)
        sched = self.scheduler(pool, chunked_prefill_size=4096)
        engine = Engine(self, pool, sched)
        self.assertTrue(engine.submit(9, input_len=10_000, max_new_tokens=10).queued)
        self.assertEqual(sched.request(9).as_dict(),
                         {"phase": kvp.PHASE_WAITING, "kv_len": 0, "output_len": 0})
        expected = [(0, 4096, True, kvp.PHASE_CHUNKING), (4096, 4096, True, kvp.PHASE_CHUNKING),
                    (8192, 1808, False, kvp.PHASE_RUNNING)]
        for prefix_len, extend_len, chunked, phase in expected:
            plan = engine.step()
            self.assertEqual(plan.kind, kvp.STEP_KIND_PREFILL)
            self.assertEqual(plan.prefill, [(9, prefix_len, extend_len, chunked)])
            self.assertEqual((plan.decode, plan.evicted), ([], []))
            self.assertEqual(plan.new_token_ratio, RATIO_INIT)  # prefill does not decay it
            self.assertEqual(sched.request(9).phase, phase)
        # a token pool hands out slots in order: the row is 1..10000
        self.assertEqual(engine.rows[9], list(range(1, 10_001)))
        self.assertEqual(sched.request(9).as_dict(),
                         {"phase": kvp.PHASE_RUNNING, "kv_len": 10_000, "output_len": 1})
        for k in range(1, 10):
            plan = engine.step()
            self.assertEqual((plan.kind, plan.decode, plan.prefill),
                             (kvp.STEP_KIND_DECODE, [9], []))
            self.assertAlmostEqual(plan.new_token_ratio, RATIO_INIT - k * RATIO_DECAY, places=12)
            self.assertEqual(engine.rows[9][-1], 10_000 + k)
        self.assertEqual(sched.request(9).output_len, 10)
        engine.finish(9)
        self.assertKvpError("INVALID_ARGUMENT", sched.request, 9, message="9")
        plan = engine.step()
        self.assertEqual(plan.kind, kvp.STEP_KIND_IDLE)
        self.assertEqual(plan.new_token_ratio, RATIO_INIT)  # reset when idle
        self.assertEqual(pool.available_size(), 1_000_000)
        stats = sched.stats().as_dict()
        self.assertAlmostEqual(stats.pop("new_token_ratio"), RATIO_INIT)
        self.assertEqual(stats, {
            "steps": 13, "prefill_steps": 3, "decode_steps": 9, "admitted": 1, "chunks": 3,
            "retractions": 0, "preemptions": 0, "aborts": 0, "unfittable": 0, "finished": 1,
            "waiting": 0, "chunking": 0, "running": 0})

    def test_unfittable_request(self):
        sched = self.scheduler(capacity=10_000, page_size=16)
        # 9000 + min(2000, 4096) + 16 = 11016 tokens at admission: more than the pool has
        result = sched.submit(1, input_len=9000, max_new_tokens=2000)
        self.assertEqual((result.queued, result.needed, result.capacity), (False, 11_016, 10_000))
        # output so far counts, the remaining output is clipped to 4096:
        # 5000 + 3000 + min(10000 - 3000, 4096) + 16
        result = sched.submit(2, input_len=5000, max_new_tokens=10_000, output_len=3000)
        self.assertEqual((result.queued, result.needed), (False, 12_112))
        # exactly the capacity is still too much (admission needs total < room)
        result = sched.submit(3, input_len=7984, max_new_tokens=2000)
        self.assertEqual((result.queued, result.needed), (False, 10_000))
        result = sched.submit(4, input_len=7983, max_new_tokens=2000)
        self.assertEqual((result.queued, result.capacity), (True, 10_000))
        stats = sched.stats()
        self.assertEqual((stats.unfittable, stats.waiting), (3, 1))
        # unfittable requests were not queued: their ids are unknown and free for reuse
        self.assertKvpError("INVALID_ARGUMENT", sched.request, 1)
        self.assertTrue(sched.submit(1, input_len=10, max_new_tokens=10).queued)
        # request 4 reserves 7984 + 2000 + 16 = all 10000 tokens: request 1 has to wait
        plan = sched.step(available=10_000)
        self.assertEqual(plan.prefill, [(4, 0, 7983, False)])
        self.assertTrue(plan.batch_is_full)
        self.assertEqual(sched.request(1).phase, kvp.PHASE_WAITING)

    def test_retraction_when_available_is_short(self):
        sched = self.scheduler(capacity=100_000, page_size=16)
        # four requests whose prompts fill whole pages; max_new_tokens 100..400
        for id, (input_len, max_new) in enumerate([(16, 100), (32, 200), (48, 300), (64, 400)]):
            self.assertTrue(sched.submit(id, input_len, max_new).queued)
        plan = sched.step(available=100_000)
        self.assertEqual([(e.id, e.extend_len) for e in plan.prefill],
                         [(0, 16), (1, 32), (2, 48), (3, 64)])
        # Every KV ends on a page boundary: the decode needs 4 pages (64 tokens); 40 are free.
        # All have generated one token, so the longest prompt (request 3) goes first, which
        # frees 64 tokens: enough.
        plan = sched.step(available=40)
        self.assertEqual(plan.kind, kvp.STEP_KIND_DECODE)
        self.assertEqual(plan.retracted, [(3, 64, 0)])
        self.assertEqual((plan.preempted, plan.aborted), ([], []))
        self.assertEqual(plan.decode, [0, 1, 2])
        self.assertAlmostEqual(plan.new_token_ratio,
                               retraction_ratio([1, 1, 1], [100, 200, 300]), places=12)
        self.assertAlmostEqual(plan.new_token_ratio, 63 / 601, places=12)
        self.assertEqual(sched.request(3).as_dict(),
                         {"phase": kvp.PHASE_WAITING, "kv_len": 0, "output_len": 1})
        stats = sched.stats()
        self.assertEqual((stats.retractions, stats.waiting, stats.running), (1, 1, 3))
        self.assertAlmostEqual(stats.new_token_ratio, 63 / 601, places=12)
        # it re-prefills its prompt and the token it had generated
        plan = sched.step(available=100_000)
        self.assertEqual(plan.prefill, [(3, 0, 65, False)])

    def test_retraction_order_and_ratio_over_the_remaining(self):
        sched = self.scheduler(capacity=100_000, page_size=16)
        # (id, input_len, output_len so far, max_new_tokens); each fills exactly one page
        for id, input_len, output_len, max_new in [(0, 16, 0, 100), (1, 12, 4, 100),
                                                  (2, 8, 8, 200)]:
            sched.submit(id, input_len, max_new, output_len=output_len)
        self.assertEqual(len(sched.step(available=100_000).prefill), 3)
        # Nothing free: fewest generated tokens first (0, then 1); the last one stays.
        plan = sched.step(available=0)
        self.assertEqual(plan.retracted, [(0, 16, 0), (1, 16, 0)])
        self.assertEqual(plan.decode, [2])
        # request 2 had 8 + 1 tokens when the estimate was made
        self.assertAlmostEqual(plan.new_token_ratio, retraction_ratio([9], [200]), places=12)
        self.assertAlmostEqual(plan.new_token_ratio, 29 / 201, places=12)
        self.assertEqual(sched.request(1).as_dict(),
                         {"phase": kvp.PHASE_WAITING, "kv_len": 0, "output_len": 5})
        plan = sched.step(available=100_000)
        self.assertEqual([(e.id, e.extend_len) for e in plan.prefill], [(0, 17), (1, 17)])

    def test_last_request_that_cannot_decode_is_aborted(self):
        sched = self.scheduler(capacity=1000, page_size=16)
        sched.submit(7, 32, 10)
        sched.step(available=1000)
        plan = sched.step(available=0)
        self.assertEqual((plan.aborted, plan.decode), ([(7, 32, 0)], []))
        self.assertKvpError("INVALID_ARGUMENT", sched.request, 7)
        self.assertEqual(sched.stats().aborts, 1)

    def test_finishing_a_request_reopens_admission(self):
        # SGLang clears batch_is_full whenever the running batch shrinks
        # (update_running_batch: `if batch.batch_size() < initial_bs`); a latched flag would
        # starve the queue until every running request is done.
        sched = self.scheduler(capacity=1000)
        for id in range(3):
            sched.submit(id, 300, 100)
        plan = sched.step(1000)  # 0 and 1 reserve 401 each; 2 does not fit the rest
        self.assertEqual(([e.id for e in plan.prefill], plan.batch_is_full), ([0, 1], True))
        plan = sched.step(400)
        self.assertEqual((plan.decode, plan.batch_is_full), ([0, 1], True))
        self.assertEqual(sched.finish(0), 301)
        # 699 free; request 1 reserves (100 - 2) x ratio < 69: request 2 fits again, as the
        # library's own adder confirms for the same numbers
        adder = self.adder(699, running=[(300, 2, 100)], new_token_ratio=plan.new_token_ratio)
        self.assertTrue(adder.add_one_req(300, 100).admitted)
        plan = sched.step(699)
        self.assertEqual(plan.kind, kvp.STEP_KIND_PREFILL)
        self.assertEqual(plan.prefill, [(2, 0, 300, False)])

    def test_finish_ex_reports_the_locked_prefix(self):
        sched = self.scheduler(capacity=1 << 16, page_size=16)
        sched.submit(1, 100, 4, prefix_len=32, prefix_evictable=16)
        sched.submit(2, 100, 4, prefix_len=32, prefix_evictable=16)
        with self.assertRaises(kvp.KvpError):
            sched.finish_ex(1)  # waiting: not running
        plan = sched.step(1 << 16)
        self.assertEqual([e.prefix_len for e in plan.prefill], [32, 32])
        gone = sched.abort_ex(2)
        self.assertIsInstance(gone, kvp.Finished)
        self.assertEqual((gone.id, gone.kv_len, gone.prefix_len, gone.prefix_evictable),
                         (2, 100, 32, 16))
        sched.step(1 << 16)
        fin = sched.finish_ex(1)
        self.assertEqual((fin.id, fin.kv_len, fin.prefix_len, fin.prefix_evictable),
                         (1, 101, 32, 16))
        self.assertKvpError("INVALID_ARGUMENT", sched.finish_ex, 1)
        sched.submit(3, 100, 4, prefix_len=32, prefix_evictable=32)
        self.assertEqual(sched.abort_ex(3).prefix_len, 0)  # waiting: locks nothing
        self.assertEqual(sched.stats().finished, 1)

    def test_evicted_entries_report_the_locked_prefix(self):
        # kvp_evicted carries prefix_len: the engine frees only row[prefix_len:kv_len] and
        # unlocks the cached prefix; the Python plan must keep it.
        sched = self.scheduler(capacity=1 << 16, page_size=16)
        sched.submit(1, 96, 4, prefix_len=32, prefix_evictable=32)
        self.assertEqual(sched.step(1 << 16).prefill, [(1, 32, 64, False)])
        plan = sched.step(0)  # its KV ends on a page boundary: no page free to decode
        self.assertEqual(plan.aborted, [(1, 96, 32)])
        self.assertEqual(plan.aborted[0].prefix_len, 32)

    def test_allow_prefill_false_skips_prefill(self):
        sched = self.scheduler(capacity=1 << 20)
        sched.submit(1, 10, 10)
        self.assertEqual(sched.step(1 << 20, 0, False).kind, kvp.STEP_KIND_IDLE)
        self.assertEqual(sched.request(1).phase, kvp.PHASE_WAITING)
        self.assertEqual(sched.step(1 << 20, 0, True).kind, kvp.STEP_KIND_PREFILL)
        sched.submit(2, 10, 10)
        plan = sched.step(1 << 20, 0, False)  # request 1 decodes, 2 keeps waiting
        self.assertEqual((plan.kind, plan.decode), (kvp.STEP_KIND_DECODE, [1]))

    def test_policy_orders_the_queue(self):
        sched = self.scheduler(capacity=1 << 30, policy=kvp.POLICY_LOF)
        for id, max_new in [(1, 5), (2, 50), (3, 500)]:
            sched.submit(id, 10, max_new)
        self.assertEqual([e.id for e in sched.step(1 << 30).prefill], [3, 2, 1])
        sched = self.scheduler(capacity=1 << 30, policy=kvp.POLICY_DFS_WEIGHT)
        for id, path in [(1, [10]), (2, [20, 21]), (3, [20]), (4, [20, 21]), (5, [])]:
            sched.submit(id, 10, 5, prefix_path=path)
        self.assertEqual([e.id for e in sched.step(1 << 30).prefill], [2, 4, 3, 1, 5])

    def test_priority_preemption(self):
        sched = self.scheduler(capacity=10_000, enable_priority=True,
                               low_priority_values_first=True, preemption_threshold=10,
                               max_running_requests=2)
        sched.submit(1, 100, 100, priority=50)
        sched.submit(2, 100, 100, priority=45)
        self.assertEqual([e.id for e in sched.step(10_000).prefill], [2, 1])
        sched.submit(4, 100, 100, priority=20)  # 30 better than request 1: preempts it
        plan = sched.step(9000)
        self.assertEqual(plan.preempted, [(1, 100, 0)])
        self.assertEqual(plan.prefill, [(4, 0, 100, False)])
        self.assertEqual(sched.request(1).phase, kvp.PHASE_WAITING)
        self.assertEqual(sched.stats().preemptions, 1)

    def test_update_prefix_and_abort(self):
        sched = self.scheduler(capacity=1 << 20, page_size=16)
        sched.submit(1, 100, 10)
        sched.update_prefix(1, 64, 32)
        plan = sched.step(1 << 20, 1000)
        self.assertEqual(plan.prefill, [(1, 64, 36, False)])
        self.assertEqual(sched.request(1).kv_len, 100)
        self.assertKvpError("INVALID_STATE", sched.update_prefix, 1, 0, 0, message="waiting")
        self.assertEqual(sched.abort(1), 100)
        self.assertEqual(sched.stats().running, 0)

    def test_bad_inputs_change_nothing(self):
        pool = self.pool(4096, 16)
        sched = self.scheduler(pool, chunked_prefill_size=256)
        engine = Engine(self, pool, sched)
        engine.submit(1, 100, 50)
        engine.submit(2, 1000, 50)
        engine.step()  # 1 runs, 2 is chunking
        engine.submit(3, 10, 5)
        states = {id: sched.request(id).as_dict() for id in (1, 2, 3)}
        stats = sched.stats().as_dict()
        pool_stats = pool.stats().as_dict()
        available = pool.available_size()
        self.assertKvpError("INVALID_STATE", sched.submit, 1, 10, 10, message="1")
        self.assertKvpError("INVALID_STATE", sched.submit, 3, 10, 10)
        self.assertKvpError("INVALID_LENGTHS", sched.submit, 9, 0, 10, message="input_len")
        self.assertKvpError("INVALID_LENGTHS", sched.submit, 9, 10, 10, prefix_len=10,
                            message="prefix_len")
        self.assertKvpError("INVALID_LENGTHS", sched.submit, 9, 10, 10, prefix_len=4,
                            prefix_evictable=5, message="prefix_evictable")
        self.assertKvpError("INVALID_ARGUMENT", sched.finish, 99, message="99")
        self.assertKvpError("INVALID_STATE", sched.finish, 2, message="abort")  # chunking
        self.assertKvpError("INVALID_STATE", sched.finish, 3)  # waiting
        self.assertKvpError("INVALID_ARGUMENT", sched.abort, 99, message="99")
        self.assertKvpError("INVALID_ARGUMENT", sched.request, 99, message="99")
        self.assertKvpError("INVALID_ARGUMENT", sched.update_prefix, 99, 0, 0)
        self.assertKvpError("INVALID_STATE", sched.update_prefix, 1, 0, 0)
        self.assertKvpError("INVALID_LENGTHS", sched.update_prefix, 3, 10, 0)
        self.assertKvpError("INVALID_LENGTHS", sched.update_prefix, 3, 4, 8)
        # raw calls: NULL pointers, and out-parameters untouched on failure
        h = sched.handle
        request = kvp.Request(id=9, input_len=10, max_new_tokens=5)
        result = kvp.SubmitResult(queued=True, needed=77, capacity=88)
        dup = kvp.Request(id=1, input_len=10, max_new_tokens=5)
        self.assertEqual(LIB.kvp_scheduler_submit(h, ctypes.byref(dup), None, 0,
                                                  ctypes.byref(result)),
                         kvp.STATUS["INVALID_STATE"])
        self.assertEqual(result.as_dict(), {"queued": True, "needed": 77, "capacity": 88})
        for args, what in [((None, ctypes.byref(request), None, 0, ctypes.byref(result)),
                            "scheduler"),
                           ((h, None, None, 0, ctypes.byref(result)), "request"),
                           ((h, ctypes.byref(request), None, 0, None), "out_result"),
                           ((h, ctypes.byref(request), None, 3, ctypes.byref(result)),
                            "prefix_path")]:
            with self.subTest(null=what):
                self.assertEqual(LIB.kvp_scheduler_submit(*args), kvp.STATUS["NULL_ARGUMENT"])
                self.assertIn(what, LIB.last_error_message())
        self.assertEqual(result.as_dict(), {"queued": True, "needed": 77, "capacity": 88})
        state = kvp.RequestState(phase=7, kv_len=7, output_len=7)
        self.assertEqual(LIB.kvp_scheduler_get_request(h, 99, ctypes.byref(state)),
                         kvp.STATUS["INVALID_ARGUMENT"])
        self.assertEqual(LIB.kvp_scheduler_get_request(h, 1, None), kvp.STATUS["NULL_ARGUMENT"])
        self.assertEqual(state.as_dict(), {"phase": 7, "kv_len": 7, "output_len": 7})
        kv_len = ctypes.c_uint64(55)
        self.assertEqual(LIB.kvp_scheduler_finish(h, 99, ctypes.byref(kv_len)),
                         kvp.STATUS["INVALID_ARGUMENT"])
        self.assertEqual(LIB.kvp_scheduler_abort(h, 99, ctypes.byref(kv_len)),
                         kvp.STATUS["INVALID_ARGUMENT"])
        self.assertEqual(kv_len.value, 55)
        self.assertEqual(LIB.kvp_scheduler_step(h, 0, 0, True, None),
                         kvp.STATUS["NULL_ARGUMENT"])
        self.assertIn("out_plan", LIB.last_error_message())
        self.assertEqual(LIB.kvp_scheduler_step(None, 0, 0, True, ctypes.byref(kvp.StepPlanC())),
                         kvp.STATUS["NULL_ARGUMENT"])
        self.assertEqual(LIB.kvp_scheduler_get_stats(h, None), kvp.STATUS["NULL_ARGUMENT"])
        self.assertEqual(LIB.kvp_scheduler_get_stats(None, ctypes.byref(kvp.SchedulerStats())),
                         kvp.STATUS["NULL_ARGUMENT"])
        self.assertEqual(LIB.kvp_scheduler_update_prefix(h, 3, 0, 0, None, 2),
                         kvp.STATUS["NULL_ARGUMENT"])
        # nothing changed: not the requests, not the counters, not the pool
        self.assertEqual({id: sched.request(id).as_dict() for id in (1, 2, 3)}, states)
        self.assertEqual(sched.stats().as_dict(), stats)
        self.assertEqual(pool.stats().as_dict(), pool_stats)
        self.assertEqual(pool.available_size(), available)
        # and the scheduler still works: the next step continues request 2 (its first chunk
        # was what request 1 left of the 256-token chunk budget: 256 - 112)
        plan = engine.step()
        self.assertEqual(plan.prefill[0], (2, 144, 256, True))

    def test_step_plan_is_a_copy(self):
        sched = self.scheduler(capacity=1 << 20)
        sched.submit(1, 10, 10)
        sched.submit(2, 20, 10)
        first = sched.step(1 << 20)
        second = sched.step(1 << 20)
        # the library reuses the plan's arrays; the Python copies stay as they were
        self.assertEqual(first.prefill, [(1, 0, 10, False), (2, 0, 20, False)])
        self.assertEqual(first.decode, [])
        self.assertEqual(second.decode, [1, 2])
        self.assertEqual(first.kind_name, "PREFILL")
        self.assertIsInstance(first.prefill[0].chunked, bool)


class TestSchedulerWithPool(KvpTestCase):
    def run_random_workload(self, seed, size, page_size, max_input, max_output, steps=150,
                            run_to_max=False, **config):
        """Random arrivals for `steps` steps (every 20th request larger than the pool can
        ever hold), then drains; each request finishes when its output reaches a random
        target (or max_new_tokens). The scheduler is attached, so the absurd `available`
        passed to every step must be ignored: if it were used, admission would over-commit
        and an allocation would fail."""
        rng = random.Random(seed)
        pool = self.pool(size, page_size)
        sched = self.scheduler(pool, **config)
        engine = Engine(self, pool, sched)
        targets, queued, unfittable = {}, 0, 0
        next_id = 0
        for step in range(100 * steps):
            if step < steps:
                for _ in range(rng.choice([0, 0, 1, 1, 2])):
                    huge = next_id % 20 == 19
                    input_len = rng.randint(size, 2 * size) if huge else rng.randint(1, max_input)
                    max_new = rng.randint(1, max_output)
                    result = engine.submit(next_id, input_len, max_new)
                    self.assertEqual(result.queued, not huge)
                    if result.queued:
                        queued += 1
                        targets[next_id] = max_new if run_to_max else rng.randint(1, max_new)
                    else:
                        unfittable += 1
                        self.assertEqual((result.needed, result.capacity),
                                         (input_len + min(max_new, 4096) + page_size, size))
                    next_id += 1
            elif not engine.rows:
                break
            engine.step(available=1 << 62, evictable=0)
            for id in list(engine.rows):
                state = sched.request(id)
                if state.phase == kvp.PHASE_RUNNING and state.output_len >= targets[id]:
                    self.assertEqual(state.output_len, targets[id])
                    engine.finish(id)
            in_use = sum(-(-len(row) // page_size) for row in engine.rows.values())
            self.assertEqual(pool.stats().pages_in_use, in_use)
        self.assertEqual(engine.rows, {}, "the workload did not drain")
        self.assertGreaterEqual(step, 300)
        self.assertEqual(pool.available_size(), size)
        pool_stats = pool.stats()
        self.assertEqual((pool_stats.pages_in_use, pool_stats.failed_allocations), (0, 0))
        stats = sched.stats()
        self.assertEqual((stats.waiting, stats.chunking, stats.running), (0, 0, 0))
        self.assertEqual(stats.finished + len(engine.aborted), queued)
        self.assertEqual(stats.unfittable, unfittable)
        self.assertGreater(unfittable, 0)
        self.assertGreater(stats.finished, 100)
        return stats, engine

    def test_random_workload_token_pool(self):
        stats, engine = self.run_random_workload(1, 3000, 1, 800, 100,
                                                 chunked_prefill_size=512)
        self.assertGreater(stats.chunks, stats.admitted)  # some prompts were chunked

    def test_random_workload_paged_pool_with_retractions(self):
        # Every request runs to max_new_tokens and admission reserves little for the output
        # (a low new-token ratio), so decode memory runs short: requests are retracted and
        # re-prefilled.
        stats, engine = self.run_random_workload(
            2, 4096, 16, 900, 300, run_to_max=True, chunked_prefill_size=256,
            init_new_token_ratio=0.05)
        self.assertGreater(stats.retractions, 0)
        retracted = [e for plan in engine.plans for e in plan.retracted]
        self.assertEqual(len(retracted), stats.retractions)
        self.assertTrue(all(e.kv_len > 0 for e in retracted))

    def test_random_workload_mixed_chunk(self):
        stats, engine = self.run_random_workload(
            3, 4096, 16, 1500, 100, chunked_prefill_size=512, enable_mixed_chunk=True)
        self.assertTrue(any(plan.prefill and plan.decode for plan in engine.plans),
                        "no step mixed decode rows into a prefill")

    def test_retraction_frees_exactly_the_row(self):
        # 64 slots, output estimates clipped to 4: three 16-token prompts are admitted
        # (16 + 4 + 1 each), then every decode step takes 3 slots.
        pool = self.pool(64, 1)
        sched = self.scheduler(pool, clip_max_new_tokens=4)
        engine = Engine(self, pool, sched)
        for id in range(4):
            self.assertTrue(engine.submit(id, 16, 20).queued)
        plan = engine.step()
        self.assertEqual([e.id for e in plan.prefill], [0, 1, 2])
        for _ in range(5):
            self.assertEqual(engine.step().decode, [0, 1, 2])
        self.assertEqual(pool.available_size(), 1)
        # 3 slots needed, 1 free: the latest of three equal requests is retracted
        row = list(engine.rows[2])
        plan = engine.step()
        self.assertEqual(plan.retracted, [(2, 21, 0)])
        self.assertEqual(plan.decode, [0, 1])
        self.assertAlmostEqual(plan.new_token_ratio, retraction_ratio([6, 6], [20, 20]),
                               places=12)
        self.assertEqual(engine.rows[2], [])
        # its slots went back to the pool (a token pool reuses the oldest free slot first)
        self.assertEqual(pool.available_size(), 1 + 21 - 2)
        self.assertTrue(set(row) & set(engine.rows[0][-1:] + engine.rows[1][-1:]))
        # run everything to max_new_tokens
        for _ in range(500):
            if not engine.rows:
                break
            engine.step()
            for id in list(engine.rows):
                state = sched.request(id)
                if state.phase == kvp.PHASE_RUNNING and state.output_len >= 20:
                    engine.finish(id)
        self.assertEqual(engine.rows, {})
        self.assertEqual(pool.available_size(), 64)
        self.assertEqual(sched.stats().finished + len(engine.aborted), 4)

    def test_scheduler_keeps_the_pool_alive_after_pool_free(self):
        pool = kvp.Pool(64, 1)
        pool.alloc(48)  # 16 tokens stay free
        sched = self.scheduler(pool)
        pool.close()  # the caller's reference is gone; the scheduler's keeps the pool
        self.assertTrue(pool.closed)
        # Each step reads the pool's 16 free tokens (the 1 << 40 passed in is ignored):
        # 20 + 2 + 1 tokens do not fit, 10 + 2 + 1 do.
        self.assertTrue(sched.submit(1, input_len=20, max_new_tokens=2).queued)
        plan = sched.step(available=1 << 40)
        self.assertEqual((plan.kind, plan.prefill), (kvp.STEP_KIND_IDLE, []))
        self.assertEqual(sched.abort(1), 0)
        sched.submit(2, input_len=10, max_new_tokens=2)
        plan = sched.step(available=1 << 40)
        self.assertEqual(plan.prefill, [(2, 0, 10, False)])
        # capacity still comes from the pool
        result = sched.submit(3, input_len=70, max_new_tokens=1)
        self.assertEqual((result.queued, result.capacity), (False, 64))
        sched.close()  # releases the pool too

    @unittest.skipUnless(os.path.exists("/proc/self/statm"), "needs /proc/self/statm")
    def test_pool_memory_is_released_with_the_last_reference(self):
        def rss_mib():
            with open("/proc/self/statm") as f:
                return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / (1 << 20)

        gc.collect()
        base = rss_mib()
        pool = kvp.Pool(1 << 24, 1)  # 16 Mi pages: tens of MiB of allocator state
        grown = rss_mib()
        self.assertGreater(grown - base, 32, "the pool's memory is not resident")
        sched = kvp.Scheduler(pool=pool)
        pool.close()
        self.assertGreater(rss_mib() - base, 32, "the pool was freed while attached")
        self.assertEqual(sched.step(available=0).kind, kvp.STEP_KIND_IDLE)
        sched.submit(1, 100, 10)
        self.assertEqual(sched.step(available=0).prefill, [(1, 0, 100, False)])
        sched.close()
        # most of it goes back to the system (malloc may keep some of it in its heap)
        self.assertLess(rss_mib() - base, (grown - base) / 2,
                        "the pool outlived its last reference")


class TestAdder(KvpTestCase):
    def test_no_token_and_the_next_verdict(self):
        adder = self.adder(1000, page_size=16, chunked_prefill_size=4096)
        start = adder.budget().as_dict()
        self.assertEqual(start, {"rem_total_tokens": 1000.0, "cur_rem_tokens": 1000,
                                 "rem_input_tokens": 16384, "rem_chunk_tokens": 4096,
                                 "state": kvp.ADD_RESULT_CONTINUE})
        # 900 + 100 + one 16-token page = 1016 >= 1000: refused, and no trace is left
        out = adder.add_one_req(900, 100)
        self.assertEqual(out.as_dict(), {"admitted": False, "chunked": False, "extend_len": 0,
                                         "next": kvp.ADD_RESULT_NO_TOKEN})
        self.assertEqual(adder.budget().as_dict(), start)
        out = adder.add_one_req(800, 100)
        self.assertEqual(out.as_dict(), {"admitted": True, "chunked": False, "extend_len": 800,
                                         "next": kvp.ADD_RESULT_CONTINUE})
        # total offset 800 + 100 + 16; current offset 800 + 16
        after = {"rem_total_tokens": 84.0, "cur_rem_tokens": 184, "rem_input_tokens": 15584,
                 "rem_chunk_tokens": 3296, "state": kvp.ADD_RESULT_CONTINUE}
        self.assertEqual(adder.budget().as_dict(), after)
        self.assertEqual(adder.add_one_req(60, 10).next, kvp.ADD_RESULT_NO_TOKEN)  # 86 >= 84
        self.assertEqual(adder.budget().as_dict(), after)
        # 50 + 10 + 16 = 76 < 84 fits; its page-ceiled 64 tokens leave rem_total -6: the
        # verdict for the next candidate is NO_TOKEN
        out = adder.add_one_req(50, 10)
        self.assertEqual((out.admitted, out.extend_len, out.next),
                         (True, 50, kvp.ADD_RESULT_NO_TOKEN))
        budget = adder.budget()
        self.assertEqual((budget.rem_total_tokens, budget.cur_rem_tokens, budget.state),
                         (-6.0, 104, kvp.ADD_RESULT_NO_TOKEN))

    def test_other_after_the_input_budget(self):
        adder = self.adder(100_000, max_prefill_tokens=1000, chunked_prefill_size=0)
        self.assertEqual(adder.budget().rem_chunk_tokens, 2**63 - 1)  # chunking disabled
        self.assertEqual(adder.add_one_req(600, 10).next, kvp.ADD_RESULT_CONTINUE)
        before = adder.budget().as_dict()
        self.assertEqual(before["rem_input_tokens"], 400)
        out = adder.add_one_req(400, 10)
        self.assertEqual((out.admitted, out.next), (False, kvp.ADD_RESULT_OTHER))
        self.assertEqual(adder.budget().as_dict(), before)
        self.assertEqual(adder.add_one_req(399, 10).extend_len, 399)
        # the first request of a pass may exceed the input budget
        adder = self.adder(100_000, max_prefill_tokens=1000, chunked_prefill_size=0)
        out = adder.add_one_req(3000, 10)
        self.assertEqual((out.admitted, out.extend_len, out.next),
                         (True, 3000, kvp.ADD_RESULT_OTHER))
        self.assertEqual(adder.budget().rem_input_tokens, -2000)

    def test_chunked_admission_seed_example(self):
        adder = self.adder(200_000, chunked_prefill_size=4096)
        out = adder.add_one_req(10_000, 128)
        self.assertEqual(out.as_dict(), {"admitted": True, "chunked": True, "extend_len": 4096,
                                         "next": kvp.ADD_RESULT_OTHER})
        # a chunk reserves no output: 4096 + 0 + 1
        self.assertEqual(adder.budget().as_dict(), {
            "rem_total_tokens": 200_000.0 - 4097, "cur_rem_tokens": 200_000 - 4097,
            "rem_input_tokens": 16384 - 4096, "rem_chunk_tokens": 0,
            "state": kvp.ADD_RESULT_OTHER})
        # the next passes continue it: 4096 more, then the last 1808
        remaining, chunks = 10_000 - 4096, [4096]
        while remaining:
            pass_adder = self.adder(200_000 - (10_000 - remaining), chunked_in_flight=1,
                                    chunked_prefill_size=4096)
            out = pass_adder.add_chunked_req(10_000 - remaining, remaining, 128)
            remaining -= out.extend_len
            self.assertTrue(out.admitted)
            self.assertEqual(out.chunked, remaining > 0)
            self.assertEqual(out.next, kvp.ADD_RESULT_OTHER if remaining else
                             kvp.ADD_RESULT_CONTINUE)
            chunks.append(out.extend_len)
        self.assertEqual(chunks, [4096, 4096, 1808])
        # the last chunk reserves its output: 1808 + 128 + 1
        self.assertEqual(pass_adder.budget().rem_total_tokens,
                         200_000 - 8192 - (1808 + 128 + 1))
        # with the continuation finished, a new request may start chunking in the same pass
        out = pass_adder.add_one_req(9000, 10)
        self.assertEqual((out.admitted, out.chunked, out.extend_len), (True, True, 4096 - 1808))

    def test_chunks_are_page_and_tile_aligned(self):
        adder = self.adder(100_000, page_size=16, chunked_prefill_size=1000,
                           truncation_align_size=256)
        out = adder.add_one_req(5000, 10)
        self.assertEqual((out.admitted, out.chunked, out.extend_len), (True, True, 768))
        adder = self.adder(100_000, page_size=16, chunked_prefill_size=200,
                           truncation_align_size=256)
        before = adder.budget().as_dict()
        self.assertEqual(adder.add_one_req(5000, 10).next, kvp.ADD_RESULT_OTHER)
        self.assertEqual(adder.budget().as_dict(), before)
        # a chunked request is already in flight: a second one may not start (one at a time)
        adder = self.adder(100_000, chunked_in_flight=1, chunked_prefill_size=4096)
        before = adder.budget().as_dict()
        out = adder.add_one_req(9000, 10)
        self.assertEqual((out.admitted, out.next), (False, kvp.ADD_RESULT_OTHER))
        self.assertEqual(adder.budget().as_dict(), before)
        self.assertEqual(adder.add_one_req(100, 10).extend_len, 100)  # whole requests may

    def test_refused_candidate_leaves_the_budget_unchanged(self):
        # 100 free + 600 evictable, 500 of which are the candidate's own cached prefix
        adder = self.adder(100, 600, chunked_prefill_size=4096)
        before = adder.budget().as_dict()
        self.assertEqual(before["rem_total_tokens"], 700.0)
        # 200 + 20 + 1 < 700, but once its prefix is locked only 200 are left
        out = adder.add_one_req(700, 20, prefix_len=500, prefix_evictable=500)
        self.assertEqual((out.admitted, out.next), (False, kvp.ADD_RESULT_NO_TOKEN))
        self.assertEqual(adder.budget().as_dict(), before)
        out = adder.add_one_req(700, 20, prefix_len=500, prefix_evictable=0)
        self.assertEqual((out.admitted, out.extend_len), (True, 200))
        self.assertEqual(adder.budget().rem_total_tokens, 700.0 - 221)
        # admitted with its prefix locked: the 500 tokens stop being room
        adder = self.adder(100, 600, chunked_prefill_size=4096)
        out = adder.add_one_req(650, 20, prefix_len=500, prefix_evictable=500)
        self.assertEqual(out.extend_len, 150)
        budget = adder.budget()
        self.assertEqual((budget.rem_total_tokens, budget.cur_rem_tokens), (200.0 - 171, 49))

    def test_running_requests_reserve_their_expected_output(self):
        # min(1100 - 100, 4096) x 0.7 = 700 reserved
        adder = self.adder(1000, running=[(10, 100, 1100)], chunked_prefill_size=4096)
        self.assertAlmostEqual(adder.budget().rem_total_tokens, 300.0, places=9)
        self.assertEqual(adder.add_one_req(250, 100).next, kvp.ADD_RESULT_NO_TOKEN)
        self.assertEqual(adder.add_one_req(150, 100).extend_len, 150)
        # ignore_eos requests are reserved at ratio 1
        adder = self.adder(1000, running=[kvp.RunningRequest(10, 100, 1100, True)])
        budget = adder.budget()
        self.assertEqual((budget.rem_total_tokens, budget.state),
                         (0.0, kvp.ADD_RESULT_NO_TOKEN))
        # the ratio is the config's
        adder = self.adder(1000, running=[(10, 100, 1100)], new_token_ratio=0.5)
        self.assertEqual(adder.budget().rem_total_tokens, 500.0)

    def test_bad_inputs(self):
        for kwargs, needle in [(dict(page_size=0), "page_size"),
                               (dict(max_chunked_requests=0), "max_chunked_requests"),
                               (dict(new_token_ratio=float("inf")), "new_token_ratio")]:
            with self.subTest(**{k: str(v) for k, v in kwargs.items()}):
                self.assertKvpError("INVALID_ARGUMENT", kvp.Adder, 1000, message=needle,
                                    **kwargs)
        config = kvp.AdderConfig.sglang_defaults(1)
        out = ctypes.c_void_p(0x1234)
        self.assertEqual(LIB.kvp_adder_new(None, 10, 0, None, 0, 0, ctypes.byref(out)),
                         kvp.STATUS["NULL_ARGUMENT"])
        self.assertEqual(LIB.kvp_adder_new(ctypes.byref(config), 10, 0, None, 2, 0,
                                           ctypes.byref(out)),
                         kvp.STATUS["NULL_ARGUMENT"])
        self.assertIn("running", LIB.last_error_message())
        self.assertEqual(LIB.kvp_adder_new(ctypes.byref(config), 10, 0, None, 0, 0, None),
                         kvp.STATUS["NULL_ARGUMENT"])
        self.assertEqual(out.value, 0x1234)

        adder = self.adder(1000, chunked_prefill_size=4096)
        adder.add_one_req(100, 10)
        before = adder.budget().as_dict()
        self.assertKvpError("INVALID_LENGTHS", adder.add_one_req, 10, 5, prefix_len=11,
                            message="prefix_len")
        self.assertKvpError("INVALID_LENGTHS", adder.add_one_req, 10, 5, prefix_len=4,
                            prefix_evictable=5, message="prefix_evictable")
        h = adder.handle
        admission = kvp.Admission(admitted=True, chunked=True, extend_len=77, next=9)
        candidate = kvp.Candidate(input_len=10, max_new_tokens=5)
        bad = kvp.Candidate(input_len=10, prefix_len=20, max_new_tokens=5)
        self.assertEqual(LIB.kvp_adder_add_one_req(h, ctypes.byref(bad),
                                                   ctypes.byref(admission)),
                         kvp.STATUS["INVALID_LENGTHS"])
        self.assertEqual(LIB.kvp_adder_add_one_req(h, None, ctypes.byref(admission)),
                         kvp.STATUS["NULL_ARGUMENT"])
        self.assertEqual(LIB.kvp_adder_add_one_req(h, ctypes.byref(candidate), None),
                         kvp.STATUS["NULL_ARGUMENT"])
        self.assertEqual(LIB.kvp_adder_add_one_req(None, ctypes.byref(candidate),
                                                   ctypes.byref(admission)),
                         kvp.STATUS["NULL_ARGUMENT"])
        self.assertEqual(LIB.kvp_adder_add_chunked_req(h, 0, 100, 5, None),
                         kvp.STATUS["NULL_ARGUMENT"])
        self.assertEqual(LIB.kvp_adder_get_budget(h, None), kvp.STATUS["NULL_ARGUMENT"])
        self.assertEqual(LIB.kvp_adder_get_budget(None, ctypes.byref(kvp.Budget())),
                         kvp.STATUS["NULL_ARGUMENT"])
        self.assertEqual(admission.as_dict(),
                         {"admitted": True, "chunked": True, "extend_len": 77, "next": 9})
        self.assertEqual(adder.budget().as_dict(), before)


class TestDelayer(KvpTestCase):
    def rank(self, prefillable, **fields):
        return kvp.RankInfo(prefillable=prefillable, **fields)

    def test_all_none_mixed(self):
        d = self.delayer()
        ready, idle = self.rank(True), self.rank(False)
        self.assertEqual(d.negotiate([ready, ready]), kvp.DELAY_VERDICT_NO_WAIT)
        self.assertEqual(d.negotiate([idle, idle]), kvp.DELAY_VERDICT_NONE_READY)
        self.assertEqual(d.negotiate([ready, idle]), kvp.DELAY_VERDICT_DELAY)
        self.assertEqual(d.negotiate([ready, idle, ready]), kvp.DELAY_VERDICT_DELAY)
        self.assertEqual(d.negotiate([ready, ready, ready]), kvp.DELAY_VERDICT_WAIT_SUCCESS)
        self.assertEqual(d.negotiate([ready, ready]), kvp.DELAY_VERDICT_NO_WAIT)
        self.assertEqual(d.negotiate([ready]), kvp.DELAY_VERDICT_NO_WAIT)

    def test_timeout_by_passes_and_by_clock(self):
        d = self.delayer(max_delay_passes=3)
        mixed = [self.rank(True), self.rank(False)]
        verdicts = [d.negotiate(mixed) for _ in range(4)]
        self.assertEqual(verdicts, [kvp.DELAY_VERDICT_DELAY, kvp.DELAY_VERDICT_DELAY,
                                    kvp.DELAY_VERDICT_WAIT_TIMEOUT, kvp.DELAY_VERDICT_DELAY])
        # the caller's clock ends the queue condition's wait once every rank's budget is
        # spent; a mixed pass is bounded by passes alone
        clock = d.local_info(False, 0.5, 4, 0, timed_out=True)
        self.assertTrue(clock.timed_out)
        self.assertEqual(d.negotiate([self.rank(True), clock]), kvp.DELAY_VERDICT_DELAY)
        self.assertEqual(d.negotiate(mixed), kvp.DELAY_VERDICT_WAIT_TIMEOUT)
        q = self.delayer(queue_min_ratio=1.0, prefill_max_requests=8)
        short = d.local_info(True, 0.5, 32, 2)
        spent = d.local_info(True, 0.5, 32, 2, timed_out=True)
        self.assertEqual(q.negotiate([short, short]), kvp.DELAY_VERDICT_NO_WAIT)  # first: skipped
        self.assertEqual(q.negotiate([short, spent]), kvp.DELAY_VERDICT_DELAY)
        self.assertEqual(q.negotiate([spent, spent]), kvp.DELAY_VERDICT_WAIT_SUCCESS)

    def test_low_watermark_forces_prefill(self):
        d = self.delayer(token_usage_low_watermark=0.3)
        low = d.local_info(True, 0.1, 4, 10)
        self.assertEqual(low.as_dict(), {"prefillable": True, "force_allow": True,
                                         "timed_out": False, "running_bs": 4,
                                         "max_prefill_bs": 0, "waiting_len": 10})
        self.assertFalse(d.local_info(True, 0.5, 4, 10).force_allow)
        self.assertFalse(d.local_info(False, 0.1, 4, 10).force_allow)
        self.assertEqual(d.negotiate([low, self.rank(False)]),
                         kvp.DELAY_VERDICT_TOKEN_WATERMARK)
        off = self.delayer()  # watermark off (negative)
        self.assertFalse(off.local_info(True, 0.0, 4, 10).force_allow)

    def test_slot_condition_uses_recorded_prefills(self):
        d = self.delayer(max_running_requests=64)
        for bs in (3, 9, 5, 0):
            d.record_prefill(bs)
        info = d.local_info(True, 0.9, 60, 100)
        self.assertEqual(info.max_prefill_bs, 9)
        # 64 - 60 = 4 free slots < 9: wait for slots, except the first time (SGLang's
        # skip_first_delayer)
        self.assertEqual(d.negotiate([info, info]), kvp.DELAY_VERDICT_NO_WAIT)
        self.assertEqual(d.negotiate([info, info]), kvp.DELAY_VERDICT_DELAY)
        roomy = kvp.RankInfo(**dict(info.as_dict(), running_bs=40))
        self.assertEqual(d.negotiate([roomy, roomy]), kvp.DELAY_VERDICT_WAIT_SUCCESS)
        for _ in range(16):
            d.record_prefill(2)  # only the last 16 count
        self.assertEqual(d.local_info(True, 0.9, 60, 100).max_prefill_bs, 2)

    def test_bad_inputs(self):
        self.assertKvpError("INVALID_ARGUMENT", kvp.Delayer, max_delay_passes=0,
                            message="max_delay_passes")
        out = ctypes.c_void_p(0x1234)
        self.assertEqual(LIB.kvp_delayer_new(None, ctypes.byref(out)),
                         kvp.STATUS["NULL_ARGUMENT"])
        self.assertEqual(out.value, 0x1234)
        d = self.delayer(max_delay_passes=2)
        h = d.handle
        verdict = ctypes.c_uint32(99)
        ranks = (kvp.RankInfo * 2)(self.rank(True), self.rank(False))
        self.assertEqual(LIB.kvp_delayer_negotiate(h, ranks, 0, ctypes.byref(verdict)),
                         kvp.STATUS["INVALID_ARGUMENT"])
        self.assertIn("num_ranks", LIB.last_error_message())
        self.assertEqual(LIB.kvp_delayer_negotiate(h, None, 2, ctypes.byref(verdict)),
                         kvp.STATUS["NULL_ARGUMENT"])
        self.assertEqual(LIB.kvp_delayer_negotiate(h, ranks, 2, None),
                         kvp.STATUS["NULL_ARGUMENT"])
        self.assertEqual(LIB.kvp_delayer_negotiate(None, ranks, 2, ctypes.byref(verdict)),
                         kvp.STATUS["NULL_ARGUMENT"])
        self.assertEqual(verdict.value, 99)
        self.assertEqual(LIB.kvp_delayer_local_info(h, True, 0.5, 1, 1, False, None),
                         kvp.STATUS["NULL_ARGUMENT"])
        self.assertEqual(LIB.kvp_delayer_record_prefill(None, 3), kvp.STATUS["NULL_ARGUMENT"])
        # the failed negotiations did not count as delayed passes: with max 2, one delay
        # and then the timeout
        self.assertEqual(d.negotiate(list(ranks)), kvp.DELAY_VERDICT_DELAY)
        self.assertEqual(d.negotiate(list(ranks)), kvp.DELAY_VERDICT_WAIT_TIMEOUT)


class TestAdmissionOwnership(KvpTestCase):
    def test_admission_objects_are_freed_exactly_once(self):
        for name, make in [
            ("kvp_scheduler_free", lambda: kvp.Scheduler(capacity=64)),
            ("kvp_adder_free", lambda: kvp.Adder(100)),
            ("kvp_delayer_free", lambda: kvp.Delayer()),
        ]:
            with self.subTest(free=name):
                frees = count_calls(self, name)
                obj = make()
                handle = obj.handle
                with obj:
                    pass
                obj.close()
                self.assertTrue(obj.closed)
                with self.assertRaises(ValueError):
                    obj.handle  # noqa: B018
                self.assertEqual(frees, [handle])
                # and a collected object is freed by the fallback
                obj = make()
                handle = obj.handle
                del obj
                gc.collect()
                self.assertEqual(frees[1:], [handle])

    def test_errors_carry_the_message(self):
        sched = self.scheduler(capacity=64)
        err = self.assertKvpError("INVALID_ARGUMENT", sched.finish, 12345)
        self.assertIn("12345", err.message)
        self.assertIn(err.message, str(err))


class TestPackage(KvpTestCase):
    """python/kvpool as a package: importable with nothing built, the library found by an
    explicit path, $KVPOOL_LIB, next to the package or in the source tree's target/release
    (or target/release/deps)."""

    def run_python(self, code, package_parent, env_lib=None):
        env = {k: v for k, v in os.environ.items() if k not in ("KVPOOL_LIB", "PYTHONPATH")}
        env["PYTHONPATH"] = package_parent
        env["PYTHONDONTWRITEBYTECODE"] = "1"
        if env_lib is not None:
            env["KVPOOL_LIB"] = env_lib
        done = subprocess.run([sys.executable, "-c", code], env=env, cwd=package_parent,
                              capture_output=True, text=True, timeout=120)
        self.assertEqual(done.returncode, 0, done.stderr)
        return done.stdout.strip()

    def copy_package(self):
        """A copy of python/kvpool in a fresh directory (no library anywhere near it)."""
        parent = tempfile.mkdtemp(prefix="kvpool-py-")
        self.addCleanup(shutil.rmtree, parent)
        shutil.copytree(os.path.join(PYTHON_DIR, "kvpool"), os.path.join(parent, "kvpool"),
                        ignore=shutil.ignore_patterns("__pycache__", "*.so*"))
        return parent

    def test_handle_classes_use_the_default_library(self):
        self.assertIs(kvp.load(), LIB)
        self.assertIs(kvp.load(LIB.path), LIB)
        pool = self.pool(8)
        self.assertIs(pool._lib, LIB)
        self.assertIs(self.scheduler(pool)._lib, LIB)
        self.assertIs(self.pool(8, lib=LIB)._lib, LIB)

    def test_import_needs_nothing_built(self):
        parent = self.copy_package()
        out = self.run_python(
            "import sys, kvpool\n"
            "assert 'torch' not in sys.modules\n"
            "try:\n"
            "    kvpool.load()\n"
            "except FileNotFoundError as e:\n"
            "    print(e)\n", parent)
        self.assertIn("libkvpool.so not found", out)
        self.assertIn("KVPOOL_LIB", out)
        out = self.run_python(
            "import kvpool\n"
            "try:\n"
            "    kvpool.Pool(8)\n"
            "except FileNotFoundError as e:\n"
            "    print(e)\n", parent, env_lib=os.path.join(parent, "missing.so"))
        self.assertEqual(out, f"KVPOOL_LIB={os.path.join(parent, 'missing.so')}: no such file")

    def test_library_search_order(self):
        parent = self.copy_package()
        code = ("import kvpool\n"
                "pool = kvpool.Pool(8)\n"
                "print(pool._lib.path, pool.alloc(2))\n")
        # an explicit path, without KVPOOL_LIB
        out = self.run_python(f"import kvpool\nprint(kvpool.load({LIB.path!r}).path)", parent)
        self.assertEqual(out, LIB.path)
        # $KVPOOL_LIB
        self.assertEqual(self.run_python(code, parent, env_lib=LIB.path), f"{LIB.path} [1, 2]")
        # target/release of the source tree holding the package (<tree>/python/kvpool)
        tree = tempfile.mkdtemp(prefix="kvpool-tree-")
        self.addCleanup(shutil.rmtree, tree)
        shutil.copytree(os.path.join(parent, "kvpool"), os.path.join(tree, "python", "kvpool"))
        os.makedirs(os.path.join(tree, "target", "release"))
        built = os.path.join(tree, "target", "release", "libkvpool.so")
        shutil.copy(LIB.path, built)
        self.assertEqual(self.run_python(code, os.path.join(tree, "python")), f"{built} [1, 2]")
        # target/release/deps, where `cargo test --release` and `cargo run --release
        # --example demo` leave the cdylib (only `cargo build` copies it up): the newer wins
        os.makedirs(os.path.join(tree, "target", "release", "deps"))
        deps = os.path.join(tree, "target", "release", "deps", "libkvpool.so")
        shutil.copy(LIB.path, deps)
        os.utime(built, (1_000_000_000, 1_000_000_000))
        self.assertEqual(self.run_python(code, os.path.join(tree, "python")), f"{deps} [1, 2]")
        os.utime(deps, (900_000_000, 900_000_000))
        self.assertEqual(self.run_python(code, os.path.join(tree, "python")), f"{built} [1, 2]")
        os.remove(built)
        self.assertEqual(self.run_python(code, os.path.join(tree, "python")), f"{deps} [1, 2]")
        # next to the package (preferred over target/release)
        beside = os.path.join(tree, "python", "kvpool", "libkvpool.so")
        shutil.copy(LIB.path, beside)
        self.assertEqual(self.run_python(code, os.path.join(tree, "python")), f"{beside} [1, 2]")

    def test_readme_quickstart(self):
        """The README's Python quickstart runs as written and does what its comments say."""
        with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
            readme = f.read()
        code = readme.split("```python\n", 1)[1].split("```", 1)[0]
        printed = []
        namespace = {"print": lambda *args: printed.append(" ".join(map(str, args)))}
        exec(compile(code, "README.md", "exec"), namespace)  # noqa: S102 - our own README
        self.assertEqual(printed, ["KVP_STATUS_DOUBLE_FREE indices[1] = 16 appears more than "
                                   "once in this call"])
        self.assertTrue(printed[0].startswith(
            re.search(r"# (KVP_STATUS_DOUBLE_FREE .*) \.\.\.", code).group(1)))
        self.assertEqual(len(namespace["slots"]), 150)
        self.assertEqual(namespace["plan"].prefill, [(1, 0, 4096, True)])
        self.assertTrue(namespace["pool"].closed)

    def test_typed_usage_runs(self):
        """tests/python/typed_usage.py, which scripts/check-types.sh type-checks against the
        stub, is also a program: its asserts on the library's answers hold."""
        done = subprocess.run([sys.executable, os.path.join(ROOT, "tests", "python",
                                                            "typed_usage.py")],
                              env={**os.environ, "KVPOOL_LIB": LIB.path},
                              capture_output=True, text=True, timeout=120)
        self.assertEqual((done.returncode, done.stdout, done.stderr), (0, "OK\n", ""))

    def test_porting_guide_names_only_what_exists(self):
        """docs/porting-from-sglang.md: every C name it gives is in the header, and every
        Python name in its tables' third column is a method or attribute of the package's
        classes (the guide would otherwise send a reader to something that is not there)."""
        with open(os.path.join(ROOT, "docs", "porting-from-sglang.md"), encoding="utf-8") as f:
            guide = f.read()
        header = read_header()
        c_names = set(re.findall(r"\bkvp_\w+", guide))
        self.assertGreater(len(c_names), 40)
        self.assertEqual(sorted(n for n in c_names if not re.search(rf"\b{n}\b", header)), [])
        owners = [kvp.Pool, kvp.Scheduler, kvp.Adder, kvp.Delayer, kvp.DecodeReservation,
                  kvp.AdderConfig, kvp]
        rows = [line.split(" | ") for line in guide.splitlines()
                if line.startswith("| ") and not line.startswith("| SGLang") and "---" not in line]
        py_names = set()
        for cells in rows:
            self.assertEqual(len(cells), 3, cells)
            for span in re.findall(r"`([^`]+)`", cells[2]):
                py_names.add(re.match(r"(?:with pool\.)?([A-Za-z_]\w*)", span).group(1))
        self.assertGreater(len(py_names), 30)
        missing = sorted(n for n in py_names if not any(hasattr(o, n) for o in owners))
        self.assertEqual(missing, [])

    def test_library_of_another_abi_is_refused(self):
        saved = kvp.ABI_VERSION
        kvp.ABI_VERSION = saved + 1
        try:
            with self.assertRaises(RuntimeError) as ctx:
                kvp.Library(LIB.path)
        finally:
            kvp.ABI_VERSION = saved
        self.assertIn(f"ABI version {saved}", str(ctx.exception))


class TestDigest(KvpTestCase):
    def test_pool_and_scheduler_digests(self):
        a, b = self.pool(64, 4), self.pool(64, 4)
        self.assertEqual(a.digest(), 0x7319987B2706B53B)  # pinned: tests/digest.rs
        self.assertEqual(a.digest(), b.digest())
        a.alloc_extend([0], [5], [-1])
        self.assertEqual(a.digest(), 0xB0B443B8BA969C7D)
        self.assertNotEqual(a.digest(), b.digest())
        b.alloc_extend([0], [5], [-1])
        self.assertEqual(a.digest(), b.digest())
        self.assertKvpError("WRONG_BACKEND", a.digest_async)
        s, t = self.scheduler(capacity=1024, page_size=4), self.scheduler(capacity=1024, page_size=4)
        self.assertEqual(s.digest(), t.digest())
        s.submit(1, input_len=10, max_new_tokens=4)
        self.assertNotEqual(s.digest(), t.digest())
        t.submit(1, input_len=10, max_new_tokens=4)
        self.assertEqual(s.digest(), t.digest())
        self.assertEqual(kvp.digest_value(-1), 2**64 - 1)

    def test_tensor_parallel_workload_in_one_process(self):
        """tests/tp/tp_digest.py's engines, all in this process with host pools: equal
        digests every step, a perturbed rank caught at its step (the GPU run uses
        torch.distributed; scripts/gpu/run.sh tp)."""
        import subprocess
        script = os.path.join(ROOT, "tests", "tp", "tp_digest.py")
        env = dict(os.environ, KVPOOL_LIB=LIB.path)
        done = subprocess.run([sys.executable, script, "--in-process", "--nproc", "3",
                               "--steps", "1500"], env=env, capture_output=True, text=True)
        self.assertEqual(done.returncode, 0, done.stdout + done.stderr)
        self.assertIn("divergence detected at step 900", done.stdout)


class TestHandleKinds(KvpTestCase):
    """A handle of the wrong kind is refused by the library (INVALID_ARGUMENT naming both
    kinds), not read as another type."""

    def test_wrong_kind_is_refused(self):
        pool = self.pool(64, 4)
        other = self.pool(64, 4)
        adder = self.adder(100)
        pool.alloc(8)
        snap = pool.backup_state()
        self.addCleanup(snap.close)
        pool.alloc(4)
        self.assertKvpError("INVALID_ARGUMENT", pool.restore_state, other,
                            message="snapshot is not a kvp_snapshot handle: it is a kvp_pool")
        self.assertKvpError("INVALID_ARGUMENT", kvp.Scheduler, adder,
                            message="pool is not a kvp_pool handle: it is a kvp_adder")
        n = ctypes.c_uint64(7)
        self.assertEqual(LIB.kvp_pool_available_size(snap.handle, ctypes.byref(n)),
                         kvp.STATUS["INVALID_ARGUMENT"])
        self.assertIn("it is a kvp_snapshot handle", LIB.last_error_message())
        self.assertEqual(n.value, 7)
        self.assertEqual(pool.available_size(), 52)  # not restored
        pool.restore_state(snap)
        self.assertEqual(pool.available_size(), 56)


def spy_calls(test, names):
    """Wraps the library functions `names` for the rest of `test`, both as typed
    (``LIB.<name>``) and as the pool's hot methods call them (``LIB.fast.<name>``, pointers
    as ints); returns the list of names called (any arguments)."""
    calls = []
    for name in names:
        for owner, original in ((LIB, LIB.function(name)),
                                (LIB.fast, LIB.fast_function(name))):

            def wrapper(*args, _name=name, _original=original):
                calls.append(_name)
                return _original(*args)

            setattr(owner, name, wrapper)
            test.addCleanup(setattr, owner, name, original)
    return calls


U64_MAX = 2**64 - 1


class TestRangeChecks(KvpTestCase):
    """Every integer the package hands to C is checked against its C type: ctypes would
    silently wrap it (2**64 + 3 becomes 3, -1 becomes UINT64_MAX). A bad value raises
    OverflowError naming the argument and the value, before any library call."""

    def assertOutOfRange(self, needle, value, call, *args, **kwargs):
        with self.assertRaises(OverflowError) as ctx:
            call(*args, **kwargs)
        text = str(ctx.exception)
        self.assertIn(f"{needle} = {value} ", text)
        self.assertIn("out of range", text)

    def test_pool_arguments(self):
        pool = self.pool(64, 4)
        pool.alloc_extend([0], [6], [-1])  # 4..9
        calls = spy_calls(self, [n for n in kvp.SIGNATURES if n.startswith("kvp_pool_")
                                 and n not in ("kvp_pool_get_stats", "kvp_pool_available_size",
                                               "kvp_pool_free")])
        before = pool.stats().as_dict()
        cases = [
            # the issue's reproducer: seq_lens[0] would wrap to 3 and the call succeed
            ("seq_lens[0]", 2**64 + 3, pool.alloc_extend, ([0], [2**64 + 3], [-1]),
             dict(extend_num_tokens=3)),
            ("prefix_lens[0]", 2**63, pool.alloc_extend, ([2**63], [2**63], [-1]), {}),
            ("prefix_lens[1]", -2**63 - 1, pool.alloc_extend, ([0, -2**63 - 1], [1, 1],
                                                               [-1, -1]), {}),
            ("extend_num_tokens", -1, pool.alloc_extend, ([0], [1], [-1]),
             dict(extend_num_tokens=-1)),
            ("extend_num_tokens", 2**64, pool.alloc_extend, ([0], [1], [-1]),
             dict(extend_num_tokens=2**64)),
            ("out_len", -1, pool.alloc_extend, ([0], [1], [-1]), dict(out_len=-1)),
            ("last_loc[0]", 2**63, pool.alloc_extend, ([1], [2], [2**63]), {}),
            ("seq_lens[0]", 2**63, pool.alloc_decode, ([2**63], [9]), {}),
            ("out_len", 2**64, pool.alloc_decode, ([7], [9]), dict(out_len=2**64)),
            ("num_tokens", -4, pool.alloc, (-4,), {}),
            ("num_tokens", 2**64 + 4, pool.alloc, (2**64 + 4,), {}),
            ("out_len", -1, pool.alloc, (4,), dict(out_len=-1)),
            ("indices[1]", -2**63 - 1, pool.free_indices, ([4, -2**63 - 1],), {}),
            ("page_ids[0]", 2**64 + 1, pool.free_pages, ([2**64 + 1],), {}),
            ("start_pos", -1, pool.free_segment, ([4, 5, 6, 7], -1, 4), {}),
            ("length", 2**64 + 4, pool.free_segment, ([4, 5, 6, 7], 0, 2**64 + 4), {}),
            ("row[0]", 2**63, pool.free_segment, ([2**63], 0, 1), {}),
            # device calls take a stream handle: a pointer-sized unsigned int
            ("stream", -1, pool.clear_async, (-1,), {}),
            ("stream", 2**64, pool.merge_and_sort_free_async, (2**64,), {}),
        ]
        for needle, value, call, args, kwargs in cases:
            with self.subTest(needle=needle, value=value):
                self.assertOutOfRange(needle, value, call, *args, **kwargs)
        self.assertEqual(calls, [])  # nothing reached the library
        self.assertEqual(pool.stats().as_dict(), before)
        self.assertEqual(pool.available_size(), 56)
        # the bounds themselves are accepted and judged by the library
        self.assertKvpError("BUFFER_TOO_SMALL", pool.alloc, U64_MAX - U64_MAX % 4, out_len=0,
                            message=str(U64_MAX - U64_MAX % 4))
        self.assertKvpError("INVALID_LENGTHS", pool.alloc_extend, [0], [2**63 - 1], [-1],
                            out_len=0, message="seq_lens[0]")

    def test_device_pool_arguments_are_checked_before_the_call(self):
        """The *_async methods check their scalars first too (a host pool posing as a device
        pool: had a call reached the library, it would say WRONG_BACKEND)."""
        pool = self.pool(64, 4)
        pool.backend = kvp.BACKEND_CUDA
        calls = spy_calls(self, [n for n in kvp.SIGNATURES if n.endswith("_async")])
        self.assertOutOfRange("num_tokens", -1, pool.alloc_async, -1, stream=0)
        self.assertOutOfRange("start_pos", -2, pool.free_segment_async, None, -2, 1, stream=0)
        self.assertOutOfRange("length", 2**64, pool.free_segment_async, None, 0, 2**64,
                              stream=0)
        self.assertOutOfRange("prefix_lens_host[0]", 2**63, pool.alloc_extend_async,
                              None, None, None, prefix_lens_host=[2**63], seq_lens_host=[1],
                              stream=0)
        self.assertOutOfRange("seq_lens_host[0]", -2**63 - 1, pool.alloc_decode_async,
                              None, None, seq_lens_host=[-2**63 - 1], stream=0)
        self.assertEqual(calls, [])

    def test_pool_config(self):
        calls = spy_calls(self, ["kvp_pool_new"])
        for kwargs, needle, value in [
            (dict(size=2**64), "size", 2**64),
            (dict(size=-64), "size", -64),
            (dict(size=64, page_size=2**32 + 4), "page_size", 2**32 + 4),
            (dict(size=64, page_size=-1), "page_size", -1),
            (dict(size=64, index_type=2**32), "index_type", 2**32),
            (dict(size=64, index_type=-1), "index_type", -1),
            (dict(size=64, backend=2**32), "backend", 2**32),
            (dict(size=64, device=2**31), "device", 2**31),
            (dict(size=64, page_size=4, backend="cuda", device=-2**31 - 1), "device",
             -2**31 - 1),
        ]:
            with self.subTest(**kwargs):
                self.assertOutOfRange(needle, value, kvp.Pool, **kwargs)
        self.assertEqual(calls, [])
        with self.assertRaises(TypeError) as ctx:
            kvp.Pool(64, page_size=4.0)  # not an integer: refused, not truncated
        self.assertIn("page_size", str(ctx.exception))

    def test_scheduler_arguments(self):
        pool = self.pool(4096, 16)
        sched = self.scheduler(pool)
        sched.submit(1, 100, 10)
        sched.step()  # 1 runs
        sched.submit(2, 50, 10)  # 2 waits
        states = {id: sched.request(id).as_dict() for id in (1, 2)}
        stats = sched.stats().as_dict()
        calls = spy_calls(self, [n for n in kvp.SIGNATURES if n.startswith("kvp_scheduler_")
                                 and n not in ("kvp_scheduler_get_stats",
                                               "kvp_scheduler_get_request",
                                               "kvp_scheduler_free")])
        cases = [
            # the issue's reproducer: input_len=-1 would be queued as UINT64_MAX tokens
            ("input_len", -1, sched.submit, (3,), dict(input_len=-1, max_new_tokens=10)),
            ("id", 2**64, sched.submit, (2**64, 10, 10), {}),
            ("max_new_tokens", -5, sched.submit, (3, 10, -5), {}),
            ("prefix_len", -1, sched.submit, (3, 10, 10), dict(prefix_len=-1)),
            ("prefix_evictable", 2**64, sched.submit, (3, 10, 10),
             dict(prefix_evictable=2**64)),
            ("output_len", -1, sched.submit, (3, 10, 10), dict(output_len=-1)),
            ("priority", 2**63, sched.submit, (3, 10, 10), dict(priority=2**63)),
            ("prefix_path[1]", -1, sched.submit, (3, 10, 10), dict(prefix_path=[7, -1])),
            ("id", -1, sched.update_prefix, (-1, 0, 0), {}),
            ("prefix_len", 2**64, sched.update_prefix, (2, 2**64, 0), {}),
            ("prefix_evictable", -1, sched.update_prefix, (2, 0, -1), {}),
            ("prefix_path[0]", 2**64, sched.update_prefix, (2, 0, 0), dict(prefix_path=[2**64])),
            ("available", -1, sched.step, (-1,), {}),
            ("evictable", 2**64, sched.step, (0, 2**64), {}),
            ("id", 2**64 + 1, sched.finish, (2**64 + 1,), {}),  # would wrap to request 1
            ("id", -1, sched.abort, (-1,), {}),
            ("id", 2**64 + 2, sched.request, (2**64 + 2,), {}),
        ]
        for needle, value, call, args, kwargs in cases:
            with self.subTest(call=call.__name__, needle=needle):
                self.assertOutOfRange(needle, value, call, *args, **kwargs)
        self.assertEqual(calls, [])
        self.assertEqual({id: sched.request(id).as_dict() for id in (1, 2)}, states)
        self.assertEqual(sched.stats().as_dict(), stats)
        self.assertKvpError("INVALID_ARGUMENT", sched.request, 3)  # 3 was never queued

    def test_an_iterator_with_a_bad_value_is_refused_as_a_list_is(self):
        """A generator is read once: the value that does not fit is named, not dropped
        (the retry that names it must not walk an exhausted iterator)."""
        sched = kvp.Scheduler(capacity=64, lib=LIB)
        self.assertOutOfRange("prefix_path[1]", 2**64, sched.submit, 3, 10, 10,
                              prefix_path=(x for x in [1, 2**64, 3]))
        self.assertOutOfRange("prefix_path[0]", -1, sched.update_prefix, 3, 0, 0,
                              prefix_path=iter([-1]))
        self.assertEqual(sched.stats().waiting, 0)

    def test_a_bytes_prefix_path_is_its_integers(self):
        # bytes are an iterable of ints (the stub's Iterable[SupportsIndex]); array.array
        # read them as raw machine words instead: b"\x01" * 8 became one id,
        # 0x0101010101010101, and b"\x01\x02" a ValueError.
        sched = kvp.Scheduler(capacity=4096, lib=LIB)
        self.addCleanup(sched.close)
        paths = []
        original = LIB.kvp_scheduler_submit

        def submit(handle, request, path, path_len, result):
            paths.append([path[i] for i in range(path_len)])
            return original(handle, request, path, path_len, result)

        LIB.kvp_scheduler_submit = submit
        self.addCleanup(setattr, LIB, "kvp_scheduler_submit", original)
        for id, path in enumerate((b"\x01" * 8, b"\x01\x02", bytearray(b"\x07\x00\xff"))):
            with self.subTest(path=path):
                sched.submit(id, 10, 10, prefix_path=path)
                self.assertEqual(paths[-1], list(path))

    def test_scheduler_config(self):
        calls = spy_calls(self, ["kvp_scheduler_new"])
        for field, value in [("capacity", -1), ("chunked_prefill_size", 2**64),
                             ("policy", 2**32), ("retraction", -1),
                             ("preemption_threshold", -2**63 - 1),
                             ("new_token_ratio_decay_steps", 2**32)]:
            with self.subTest(field=field):
                self.assertOutOfRange(field, value, kvp.Scheduler,
                                      **{"capacity": 4096, field: value})
        self.assertEqual(calls, [])
        config = LIB.kvp_scheduler_config_default()
        before = config.capacity, config.page_size
        with self.assertRaises(OverflowError):  # checked before any field is set
            kvp.Scheduler(config=config, page_size=16, capacity=-1)
        self.assertEqual((config.capacity, config.page_size), before)

    def test_double_fields_name_a_value_they_cannot_take(self):
        # A config's double field took what ctypes made of the value: 10**400 raised
        # "int too large to convert to float", a str "must be real number, not str", neither
        # naming the field.
        calls = spy_calls(self, ["kvp_scheduler_new", "kvp_adder_new", "kvp_delayer_new"])
        for make, field in ((kvp.Scheduler, "init_new_token_ratio"),
                            (lambda **kw: kvp.Adder(100, **kw), "new_token_ratio"),
                            (kvp.Delayer, "token_usage_low_watermark")):
            with self.subTest(field=field):
                self.assertOutOfRange(field, 10**400, make, **{field: 10**400})
                with self.assertRaises(TypeError) as ctx:
                    make(**{field: "0.5"})
                self.assertIn(field, str(ctx.exception))
        self.assertEqual(calls, [])
        config = LIB.kvp_scheduler_config_default()
        before = config.as_dict()
        with self.assertRaises(OverflowError):  # checked before any field is set
            kvp.Scheduler(config=config, capacity=8, init_new_token_ratio=-10**400)
        self.assertEqual(config.as_dict(), before)
        sched = self.scheduler(capacity=4096, init_new_token_ratio=1, dynamic_chunk_a=0.25)
        self.assertEqual((sched.config.init_new_token_ratio, sched.config.dynamic_chunk_a),
                         (1.0, 0.25))

    def test_adder_arguments(self):
        calls = spy_calls(self, ["kvp_adder_new"])
        for args, kwargs, needle, value in [
            ((-1,), {}, "available", -1),
            ((100, 2**64), {}, "evictable", 2**64),
            ((100, 0, (), -1), {}, "chunked_in_flight", -1),
            ((100, 0, [(10, 0, 5), (10, -1, 5)]), {}, "output_len", -1),
            ((100,), dict(page_size=-16), "page_size", -16),
            ((100,), dict(max_prefill_tokens=2**64), "max_prefill_tokens", 2**64),
        ]:
            with self.subTest(needle=needle):
                self.assertOutOfRange(needle, value, kvp.Adder, *args, **kwargs)
        self.assertEqual(calls, [])
        self.assertOutOfRange("page_size", -1, kvp.AdderConfig.sglang_defaults, -1)
        adder = self.adder(1000)
        before = adder.budget().as_dict()
        calls = spy_calls(self, ["kvp_adder_add_one_req", "kvp_adder_add_chunked_req"])
        self.assertOutOfRange("input_len", -1, adder.add_one_req, -1, 10)
        self.assertOutOfRange("max_new_tokens", 2**64, adder.add_one_req, 10, 2**64)
        self.assertOutOfRange("prefix_len", -1, adder.add_chunked_req, -1, 10, 10)
        self.assertOutOfRange("remaining", 2**64, adder.add_chunked_req, 0, 2**64, 10)
        self.assertOutOfRange("max_new_tokens", -1, adder.add_chunked_req, 0, 10, -1)
        self.assertEqual(calls, [])
        self.assertEqual(adder.budget().as_dict(), before)

    def test_delayer_arguments(self):
        calls = spy_calls(self, ["kvp_delayer_new", "kvp_delayer_local_info",
                                 "kvp_delayer_record_prefill"])
        self.assertOutOfRange("max_delay_passes", 2**32, kvp.Delayer, max_delay_passes=2**32)
        self.assertOutOfRange("max_running_requests", -1, kvp.Delayer,
                              max_running_requests=-1)
        self.assertEqual(calls, [])
        d = self.delayer(max_delay_passes=2)
        del calls[:]
        self.assertOutOfRange("running_bs", -1, d.local_info, True, 0.5, -1, 0)
        self.assertOutOfRange("waiting_len", 2**64, d.local_info, True, 0.5, 0, 2**64)
        self.assertOutOfRange("batch_size", -1, d.record_prefill, -1)
        self.assertEqual(calls, [])

    def test_negotiate_checks_ranks_given_as_tuples(self):
        # As Adder's running requests: a tuple is a RankInfo's fields, each range-checked
        # (ctypes' own conversion wrapped them: running_bs -1 became UINT64_MAX).
        d = self.delayer(max_running_requests=64)
        calls = spy_calls(self, ["kvp_delayer_negotiate"])
        self.assertOutOfRange("running_bs", -1, d.negotiate,
                              [(True, False, False, 4, 0, 0), (True, False, False, -1, 0, 0)])
        self.assertOutOfRange("waiting_len", 2**64 + 3, d.negotiate,
                              [(True, False, False, 4, 0, 2**64 + 3)])
        self.assertEqual(calls, [])
        twin = self.delayer(max_running_requests=64)
        for running_bs in (60, 60, 40):  # the same verdicts from tuples and from structs
            fields = (True, False, False, running_bs, 9, 100)
            self.assertEqual(d.negotiate([fields, fields]),
                             twin.negotiate([kvp.RankInfo(*fields), kvp.RankInfo(*fields)]))


@unittest.skipIf(torch is None, "PyTorch is not installed")
class TestTorch(KvpTestCase):
    """Tensors as index and length buffers of host pools (CPU tensors only; device pools and
    CUDA tensors: tests/python/test_cuda.py)."""

    def i64(self, values):
        # (on the CPU: torch.tensor follows torch's default device, which one test changes)
        return torch.tensor(values, dtype=torch.int64, device="cpu")

    def test_tensors_in_tensors_out(self):
        pool = self.pool(64, 4)
        slots = pool.alloc_extend(self.i64([0]), self.i64([2]), self.i64([-1]))
        self.assertIsInstance(slots, torch.Tensor)
        self.assertEqual(slots.dtype, torch.int64)
        self.assertEqual(slots.tolist(), [4, 5])
        # lists and tensors mix; a tensor anywhere gives a tensor back
        self.assertEqual(pool.alloc_extend([2], self.i64([11]), slots[-1:]).tolist(),
                         list(range(6, 15)))
        self.assertEqual(pool.alloc_decode(self.i64([12]), self.i64([14])).tolist(), [15])
        self.assertEqual(pool.alloc(4), [16, 17, 18, 19])  # lists in, list out
        pool.free_indices(self.i64([16]))
        pool.free_pages(self.i64([2, 1]))
        self.assertEqual(pool.available_size(), 60)

    def test_new_outputs_are_cpu_tensors_whatever_the_default_device(self):
        """A host pool writes through a new output's address, so the output is made on the
        CPU even under torch.set_default_device: there "cuda" would make a CUDA tensor (a
        device address, written by the CPU); "meta" stands in for it (its tensors have no
        memory: before, the call was refused for their address 0). Every way a host call
        makes a tensor: the inline lanes, the general path, a call by request row."""
        i64 = self.i64

        def calls(pool):
            table = array.array("q", bytes(8 * 4 * 16))
            t = kvp.ReqTable(table.buffer_info()[0], kvp.INDEX_TYPE_I64, 4, 16, 16)
            first = pool.alloc_extend(i64([0, 0]), i64([3, 2]), i64([-1, -1]))  # lane
            return [first,
                    pool.alloc_extend(i64([0]), i64([5]), i64([-1]), 5),  # lane, given count
                    pool.alloc_extend([0], i64([2]), [-1]),  # the general path
                    pool.alloc_decode(i64([4]), first[2:3]),  # lane
                    pool.alloc_extend_rows(t, i64([1]), i64([0]), i64([6]))]  # by row

        plain_pool = self.pool(256, 4)
        plain = calls(plain_pool)
        pool = self.pool(256, 4)
        previous = torch.get_default_device()
        torch.set_default_device("meta")
        try:
            made = calls(pool)
        finally:
            torch.set_default_device(previous)
        for got, want in zip(made, plain):
            self.assertTrue(got.is_cpu)
            self.assertIs(got.dtype, torch.int64)
            self.assertEqual(got.tolist(), want.tolist())
        self.assertEqual(pool.available_size(), plain_pool.available_size())

    def test_out_tensor_and_int32_rows(self):
        pool = self.pool(64, 4, index_type=kvp.INDEX_TYPE_I32)
        out = torch.full((8,), -7, dtype=torch.int32)  # a preallocated out_cache_loc
        got = pool.alloc_extend(self.i64([0, 0]), self.i64([3, 2]),
                                torch.tensor([-1, -1], dtype=torch.int32), out=out)
        self.assertEqual(got.data_ptr(), out.data_ptr())  # a view of out, no copy
        self.assertEqual(out.tolist(), [4, 5, 6, 8, 9, -7, -7, -7])
        self.assertEqual(pool.alloc(4, out=out).tolist(), [12, 13, 14, 15])
        # free a request's row straight out of a 2-D req_to_token table
        req_to_token = torch.zeros((2, 16), dtype=torch.int32)
        req_to_token[1, :3] = torch.tensor([4, 5, 6], dtype=torch.int32)
        pool.free_segment(req_to_token[1, :3], 0, 3)
        self.assertEqual(pool.available_size(), 64 - 8)

    def test_bad_tensors_are_refused_before_the_call(self):
        pool = self.pool(64, 4)
        pool.alloc(8)
        before = pool.stats().as_dict()
        cases = [
            (TypeError, "torch.int64", pool.free_indices,
             (torch.tensor([4], dtype=torch.int32),)),
            (TypeError, "torch.int64", pool.alloc_decode,
             (torch.tensor([1], dtype=torch.int32), [-1])),
            (ValueError, "contiguous", pool.free_indices, (self.i64([4, 0, 5, 0])[::2],)),
            (ValueError, "1-D", pool.free_pages, (self.i64([[1]]),)),
            (ValueError, "must be on the CPU", pool.free_indices,
             (torch.empty(2, dtype=torch.int64, device="meta"),)),
            (TypeError, "torch.int64", pool.alloc,
             (4,), {"out": torch.empty(4, dtype=torch.int32)}),
            (TypeError, "tensor", pool.alloc, (4,), {"out": [0, 0, 0, 0]}),
        ]
        if torch.cuda.is_available():
            cases.append((ValueError, "must be on the CPU", pool.free_indices,
                          (self.i64([4]).cuda(),)))
            cases.append((ValueError, "must be on the CPU", pool.alloc,
                          (4,), {"out": torch.empty(4, dtype=torch.int64, device="cuda")}))
        for case in cases:
            error, needle, call, args = case[:4]
            kwargs = case[4] if len(case) > 4 else {}
            with self.subTest(call=call.__name__, needle=needle):
                with self.assertRaises(error) as ctx:
                    call(*args, **kwargs)
                self.assertIn(needle, str(ctx.exception))
        self.assertEqual(pool.stats().as_dict(), before)  # nothing reached the library

    def test_contiguous_views_are_taken(self):
        pool = self.pool(64, 4)
        self.assertEqual(pool.alloc(8), list(range(4, 12)))
        table = torch.tensor([[4, 5, 6, 7], [8, 9, 10, 11]])
        pool.free_indices(table[1])  # a row of a 2-D table: a contiguous 1-D view
        pool.free_indices(torch.tensor([4, 0, 0])[::2][:1])  # one element: contiguous
        self.assertEqual(pool.available_size(), 64)

    @staticmethod
    def python_calls(call):
        """The names of the Python functions `call()` ran (not the builtins)."""
        names = set()

        def profile(frame, event, arg):
            if event == "call":
                names.add(frame.f_code.co_name)

        sys.setprofile(profile)
        try:
            call()
        finally:
            sys.setprofile(None)
        return names

    def test_common_tensors_take_the_inline_lane(self):
        """alloc_extend, alloc_decode, alloc (out=) and free_indices on CPU tensors of the
        common case (dtype, 1-D, contiguous) check them inline and call C with their
        data_ptr(): no handler call (_buffers._from_tensor); anything else still goes through
        it."""
        for index_type, dtype in ((kvp.INDEX_TYPE_I64, torch.int64),
                                  (kvp.INDEX_TYPE_I32, torch.int32)):
            pool = self.pool(256, 4, index_type=index_type)
            pool.free_indices(pool.alloc_extend([0], [1], [-1]))  # every kind seen once
            p, s = self.i64([0, 0]), self.i64([5, 2])
            last = torch.tensor([-1, -1], dtype=dtype)
            out = torch.full((9,), -7, dtype=dtype)
            results = []
            names = self.python_calls(lambda: results.append(
                pool.alloc_extend(p, s, last, 7, out=out)))
            self.assertNotIn("_from_tensor", names)
            self.assertEqual(results[0].data_ptr(), out.data_ptr())  # a view of out
            self.assertEqual(results[0].tolist(), [4, 5, 6, 7, 8, 12, 13])
            self.assertEqual(out[7:].tolist(), [-7, -7])  # out[:7] returned, the rest kept
            # a new output of the index dtype
            names = self.python_calls(lambda: results.append(
                pool.alloc_decode(self.i64([6, 3]), torch.tensor([8, 13], dtype=dtype))))
            self.assertNotIn("_from_tensor", names)
            self.assertEqual(results[1].dtype, dtype)
            self.assertEqual(results[1].tolist(), [9, 14])
            alloc_out = torch.full((5,), -7, dtype=dtype)
            names = self.python_calls(lambda: results.append(pool.alloc(4, out=alloc_out)))
            names |= self.python_calls(lambda: pool.free_indices(results[-1]))
            self.assertNotIn("_from_tensor", names)
            self.assertEqual(alloc_out.tolist(), [16, 17, 18, 19, -7])
            results.pop()
            # one element with a stride of 2 (contiguous, but not stride (1,)): the handler
            strided = torch.tensor([9, 0], dtype=dtype)[::2]
            names = self.python_calls(lambda: results.append(
                pool.alloc_decode(self.i64([7]), strided)))
            self.assertIn("_from_tensor", names)
            self.assertEqual(results[2].tolist(), [10])
            # no extend_num_tokens, no out: the planning's sum, a new tensor
            names = self.python_calls(lambda: results.append(
                pool.alloc_extend(self.i64([0]), self.i64([2]), last[:1])))
            self.assertNotIn("_from_tensor", names)
            self.assertEqual(results.pop().tolist(), [16, 17])  # page 4, freed first

    def test_the_tensor_lane_matches_buffers_in_lockstep(self):
        """Two pools, one called with CPU tensors (the inline lanes), one with array.array
        (the library's buffer entry points): the same results, errors and stats over random
        alloc_extend, alloc_decode, alloc and free_indices calls, some with lengths that
        disagree, a short out, a wrong or no extend_num_tokens, no out, a prefix past its
        length, a double free."""
        rng = random.Random(20261207)
        makers = (lambda values, dtype: torch.tensor(values, dtype=dtype),
                  lambda values, dtype: array.array("q" if dtype is torch.int64 else "i",
                                                    values))
        for index_type, dtype in ((kvp.INDEX_TYPE_I64, torch.int64),
                                  (kvp.INDEX_TYPE_I32, torch.int32)):
            pools = [self.pool(512, 4, index_type=index_type) for _ in makers]
            live = []
            seq = picked = taken = None  # what the step's call was for (track_requests)
            for step in range(300):
                op = rng.choice(("extend", "extend", "decode", "alloc", "free", "free"))
                if op != "extend" and not live:
                    op = "extend"
                kwargs = {}
                if op == "extend":
                    bs = rng.randint(1, 4)
                    prefix = [0] * bs
                    seq = [rng.randint(1, 40) for _ in range(bs)]
                    n = sum(seq) + rng.choice((0, 0, 0, 0, 1, -1))
                    if rng.random() < 0.3:
                        n = None  # the default: the library's planning's sum
                    if rng.random() < 0.05:
                        prefix[0] = seq[0] + 1  # a prefix past its length: refused
                    last = [-1] * (bs + (1 if rng.random() < 0.05 else 0))
                    if rng.random() < 0.8:
                        kwargs["out"] = [-1] * max(sum(seq) + rng.choice((0, 0, 0, 3, -1)), 0)
                    args = (("q", prefix), ("q", seq), ("i", last), n)
                    call = "alloc_extend"
                elif op == "decode":
                    picked = rng.sample(range(len(live)), rng.randint(1, min(4, len(live))))
                    seq = [len(live[i]) + 1 for i in picked]
                    if rng.random() < 0.05:
                        seq.append(1)  # one length too many
                    if rng.random() < 0.8:
                        kwargs["out"] = [-1] * len(picked)
                    args = (("q", seq), ("i", [live[i][-1] for i in picked]))
                    call = "alloc_decode"
                elif op == "alloc":
                    n = rng.choice((4, 8, 16))
                    kwargs["out"] = [-1] * (n + rng.choice((0, 0, 2, -1)))
                    args = (n,)
                    call = "alloc"
                else:
                    taken, slots = random_free(rng, live)
                    args = (("i", slots),)
                    call = "free_indices"
                outcomes = []
                for pool, make in zip(pools, makers):
                    def arg(a, make=make):
                        if not isinstance(a, tuple):
                            return a
                        return make(a[1], torch.int64 if a[0] == "q" else dtype)
                    given = {k: make(v, dtype) for k, v in kwargs.items()}
                    try:
                        got = getattr(pool, call)(*map(arg, args), **given)
                        outcomes.append(("ok", None if got is None else as_list(got)))
                    except kvp.KvpError as err:
                        outcomes.append(("error", err.name, err.message))
                    except (TypeError, ValueError) as err:
                        outcomes.append((type(err).__name__, str(err)))
                with self.subTest(index_type=index_type, step=step, call=call):
                    self.assertEqual(outcomes[0], outcomes[1])
                if outcomes[0][0] != "ok":
                    continue
                if call == "alloc":
                    live.append(outcomes[0][1])
                else:
                    track_requests(live, call, outcomes[0][1], seq, picked, taken)
            self.assertEqual(pools[0].stats().as_dict(), pools[1].stats().as_dict())
            self.assertGreater(len(live), 0)


# ---- host arrays of every kind (python/kvpool/_buffers.py) ---------------------------------


def host_kinds():
    """{name: (make(values, typecode) -> host array, installed)} for every kind of host array
    the pool's methods take; numpy and torch where installed."""
    def np_array(values, typecode):
        return numpy.array(values, dtype=numpy.int64 if typecode == "q" else numpy.int32)

    def tensor(values, typecode):
        return torch.tensor(values, dtype=torch.int64 if typecode == "q" else torch.int32)

    return {
        "list": (lambda values, typecode: list(values), True),
        "tuple": (lambda values, typecode: tuple(values), True),
        "array": (lambda values, typecode: array.array(typecode, values), True),
        "memoryview": (lambda values, typecode: memoryview(array.array(typecode, values)),
                       True),
        "read-only memoryview": (
            lambda values, typecode: memoryview(bytes(array.array(typecode, values))).cast(
                typecode), True),
        "numpy": (np_array, numpy is not None),
        "torch": (tensor, torch is not None),
    }


def as_list(value):
    return value.tolist() if hasattr(value, "tolist") else list(value)


class TestHostArrayKinds(KvpTestCase):
    """Every kind of host array gives the same indices as lists, and lists keep working:
    buffers (array.array, memoryview, numpy arrays) and CPU tensors go to C by address
    without a copy; lists are converted by array.array (O(n) at C speed)."""

    def run_sequence(self, make, typecode, index_type):
        """A fixed sequence of every host call, host arrays made by `make`; returns every
        result as a list, and the pool's stats."""
        pool = self.pool(256, 4, index_type=index_type)
        i64 = lambda values: make(values, "q")  # noqa: E731 - lengths are always int64
        idx = lambda values: make(values, typecode)  # noqa: E731
        got = []
        a = pool.alloc_extend(i64([0, 0, 0]), i64([6, 3, 4]), idx([-1, -1, -1]))
        got.append(as_list(a))  # [4..9, 12..14, 16..19]
        last = as_list(a)
        d = pool.alloc_decode(i64([7, 4, 5]), idx([last[5], last[8], last[12]]))
        got.append(as_list(d))
        got.append(as_list(pool.alloc_extend(i64([7]), i64([9]), idx([as_list(d)[0]]),
                                             extend_num_tokens=2)))
        got.append(as_list(pool.alloc(8)))
        pool.rewind(idx([as_list(d)[1]]))
        pool.free_indices(idx(as_list(d)[2:]))
        pool.free_pages(idx([as_list(got[3])[0] // 4]))
        pool.free_segment(idx(got[0][:6] + got[1][:1] + got[2]), 0, 9)
        got.append(pool.available_size())
        got.append(as_list(pool.alloc_extend(i64([]), i64([]), idx([]))))
        pool.free_indices(idx([]))
        return got, pool.stats().as_dict()

    def test_an_out_over_an_input_is_refused_and_changes_nothing(self):
        # The call reads its inputs again while it writes: an `out` over last_loc made B
        # continue from a slot A had just been handed (a slot handed out twice).
        pool = self.pool(64, 4)
        b = as_list(pool.alloc_extend(array.array("q", [0]), array.array("q", [2]),
                                      array.array("q", [-1])))
        before = pool.available_size()
        buf = array.array("q", [-9] * 16)
        buf[0], buf[1] = -1, b[-1]
        view = memoryview(buf)
        self.assertKvpError("INVALID_ARGUMENT", pool.alloc_extend, array.array("q", [0, 2]),
                            array.array("q", [8, 3]), view[:2], out=view,
                            message="out overlaps last_loc")
        self.assertKvpError("INVALID_ARGUMENT", pool.alloc_decode, view[2:4], view[:2],
                            out=view[3:5], message="out overlaps seq_lens")
        self.assertEqual(pool.available_size(), before)
        self.assertEqual(list(buf[2:]), [-9] * 14)
        # Side by side the same call goes through, B continuing its own page.
        got = as_list(pool.alloc_extend(array.array("q", [0, 2]), array.array("q", [8, 3]),
                                        view[:2], out=view[2:11]))
        self.assertEqual(got[8], b[-1] + 1)

    def test_an_out_without_len_fails_before_the_call_or_works(self):
        # A buffer that has no len() (pickle.PickleBuffer): a call either raises before the
        # pool changes (the entry points' path; it had raised after the slots were taken,
        # losing them) or allocates (the general path reads it as a buffer).
        import pickle
        pool = self.pool(64, 4)
        for _ in range(2):  # (the second with the type known to the fast path)
            before = pool.available_size()
            memory = array.array("q", [0, 0])
            try:
                pool.alloc_decode(array.array("q", [1, 1]), array.array("q", [-1, -1]),
                                  out=pickle.PickleBuffer(memory))
            except TypeError:
                self.assertEqual(pool.available_size(), before)
                self.assertEqual(list(memory), [0, 0])
            else:
                self.assertEqual(pool.available_size(), before - 8)
                self.assertTrue(all(slot > 0 for slot in memory), list(memory))

    def test_buffers_without_len_work_every_time(self):
        # A buffer without len() (pickle.PickleBuffer) as lengths: the first call (its type
        # not yet known) worked, every later one raised TypeError through the entry points'
        # path, which took len(seq_lens) for a new output outside its try.
        import pickle
        pool, twin = self.pool(64, 4), self.pool(64, 4)
        q = lambda values: array.array("q", values)  # noqa: E731
        for _ in range(3):
            got = pool.alloc_decode(pickle.PickleBuffer(q([1, 1])),
                                    pickle.PickleBuffer(q([-1, -1])))
            self.assertEqual(as_list(got), as_list(twin.alloc_decode(q([1, 1]), q([-1, -1]))))
        self.assertEqual(pool.stats().as_dict(), twin.stats().as_dict())

    def test_buffers_of_standard_size_formats(self):
        # ctypes arrays export formats such as '<q' (int64, any platform), which the package
        # takes but memoryview cannot read elements of: the sum of the default
        # extend_num_tokens raised NotImplementedError (instead of naming counts that
        # disagree, or allocating), and an out longer than needed came back as an unreadable
        # view of its prefix.
        def c_array(values, ctype=ctypes.c_int64):
            return (ctype * len(values))(*values)

        pool, twin = self.pool(64, 4), self.pool(64, 4)
        self.assertEqual(memoryview(c_array([0])).format, "<q")
        with self.assertRaisesRegex(ValueError, "one entry per request"):
            pool.alloc_extend(c_array([0]), c_array([2, 3]), c_array([-1]))
        got = pool.alloc_extend(c_array([0]), c_array([5]), c_array([-1]), out_len=6)
        self.assertEqual(as_list(got), twin.alloc_extend([0], [5], [-1]))
        out = c_array([0] * 6)
        got = pool.alloc(4, out=out)
        self.assertEqual(as_list(got), twin.alloc(4))
        self.assertEqual(list(out), as_list(got) + [0, 0])
        pool32, twin32 = (self.pool(64, 4, index_type=kvp.INDEX_TYPE_I32) for _ in range(2))
        got = pool32.alloc_decode(c_array([1]), c_array([-1], ctypes.c_int32),
                                  out=c_array([0] * 3, ctypes.c_int32))
        self.assertEqual(as_list(got), twin32.alloc_decode([1], [-1]))
        self.assertEqual(pool.stats().as_dict(), twin.stats().as_dict())

    def test_a_default_output_is_not_sized_by_more_tokens_than_the_pool_has(self):
        # Given extend_num_tokens and no out, the call made an output of that many slots
        # before the library refused the count: 2**40 raised MemoryError (10**9 would take
        # 8 GB) instead of the library's INVALID_LENGTHS, and a batch that needs more slots
        # than the pool has still runs short as it should.
        pool = self.pool(64, 4)
        table = array.array("q", bytes(8 * 2 * 16))
        t = kvp.ReqTable(table.buffer_info()[0], kvp.INDEX_TYPE_I64, 2, 16, 16)
        for name, (make, installed) in host_kinds().items():
            if not installed:
                continue
            q = lambda values: make(values, "q")  # noqa: E731
            with self.subTest(kind=name):
                self.assertKvpError("INVALID_LENGTHS", pool.alloc_extend, q([0]), q([3]),
                                    q([-1]), extend_num_tokens=2**40,
                                    message="extend_num_tokens is 1099511627776")
                self.assertKvpError("INVALID_LENGTHS", pool.alloc_extend, q([0]), q([65]),
                                    q([-1]), extend_num_tokens=2**40, message="seq_lens[0]")
                self.assertKvpError("OUT_OF_SLOTS", pool.alloc_extend, q([0, 0]),
                                    q([40, 40]), q([-1, -1]), extend_num_tokens=80)
                self.assertKvpError("INVALID_LENGTHS", pool.alloc_extend_rows, t, q([0]),
                                    q([0]), q([3]), extend_num_tokens=2**40,
                                    message="extend_num_tokens is 1099511627776")
        self.assertEqual(pool.available_size(), 64)
        self.assertEqual(bytes(table), bytes(8 * 2 * 16))

    def test_generator_lengths_with_an_out_buffer_work(self):
        # Iterables are documented inputs: with an out buffer, the entry points' path (which
        # needs len()) leaves them to the general path.
        pool = self.pool(64, 4)
        out = array.array("q", [0, 0])
        got = pool.alloc_decode((n for n in (1, 1)), (x for x in (-1, -1)), out=out)
        self.assertEqual(as_list(got), [4, 8])
        self.assertEqual(list(out), [4, 8])

    def test_every_kind_gives_the_same_indices(self):
        for index_type, typecode in ((kvp.INDEX_TYPE_I64, "q"), (kvp.INDEX_TYPE_I32, "i")):
            want = self.run_sequence(host_kinds()["list"][0], typecode, index_type)
            self.assertEqual(want[0][0], [4, 5, 6, 7, 8, 9, 12, 13, 14, 16, 17, 18, 19])
            for name, (make, installed) in host_kinds().items():
                with self.subTest(kind=name, index_type=index_type):
                    if not installed:
                        self.skipTest(f"{name} is not installed")
                    self.assertEqual(self.run_sequence(make, typecode, index_type), want)

    def test_result_kinds(self):
        """A list in gives a list, a tensor a tensor, a numpy array a numpy array, another
        buffer an array.array; out= is written in place and returned itself when exactly
        filled, else its first k elements (a view, never a copy)."""
        pool = self.pool(256, 4)
        q = lambda values: array.array("q", values)  # noqa: E731
        r = pool.alloc_extend([0], [2], [-1])
        self.assertEqual(r, [4, 5])
        r = pool.alloc_extend(q([0]), q([2]), q([-1]))
        self.assertIsInstance(r, array.array)
        self.assertEqual((r.typecode, r.tolist()), ("q", [8, 9]))
        r = pool.alloc_decode(memoryview(q([3])), [r[1]])
        self.assertEqual((type(r), r.tolist()), (array.array, [10]))
        out = q([-7] * 4)
        self.assertIs(pool.alloc(4, out=out), out)
        self.assertEqual(out.tolist(), [12, 13, 14, 15])
        out = q([-7] * 6)
        r = pool.alloc(4, out=out)
        self.assertIsInstance(r, memoryview)  # a view of out's first 4 (slicing would copy)
        self.assertEqual((r.tolist(), out.tolist()), ([16, 17, 18, 19], [16, 17, 18, 19, -7, -7]))
        del r
        view = memoryview(q([-7] * 2))
        self.assertIs(pool.alloc_extend([0], [2], [-1], out=view), view)
        self.assertEqual(pool.alloc(4, out_len=4), [24, 25, 26, 27])
        if numpy is not None:
            r = pool.alloc_extend(numpy.array([0]), [2], [-1])
            self.assertIsInstance(r, numpy.ndarray)
            self.assertEqual((r.dtype, r.tolist()), (numpy.dtype("int64"), [28, 29]))
            out = numpy.full(6, -7, dtype=numpy.int64)
            r = pool.alloc(4, out=out)
            self.assertTrue(numpy.shares_memory(r, out))
            self.assertEqual((r.tolist(), out.tolist()), ([32, 33, 34, 35],
                                                          [32, 33, 34, 35, -7, -7]))
        if torch is not None:  # a tensor anywhere wins over numpy and buffers
            r = pool.alloc_extend(q([0]), torch.tensor([2]), [-1])
            self.assertIsInstance(r, torch.Tensor)
            out = torch.full((4,), -7, dtype=torch.int64)
            self.assertIs(pool.alloc(4, out=out), out)

    def test_new_numpy_outputs_have_the_pools_index_dtype(self):
        if numpy is None:
            self.skipTest("numpy is not installed")
        for index_type, dtype in ((kvp.INDEX_TYPE_I64, numpy.int64),
                                  (kvp.INDEX_TYPE_I32, numpy.int32)):
            with self.subTest(dtype=dtype.__name__):
                pool = self.pool(256, 4, index_type=index_type)
                lengths = lambda values: numpy.array(values, dtype=numpy.int64)  # noqa: E731
                r = pool.alloc_extend(lengths([0]), lengths([2]), numpy.array([-1], dtype=dtype))
                self.assertEqual((r.dtype, r.tolist()), (numpy.dtype(dtype), [4, 5]))
                r = pool.alloc_extend(lengths([0]), lengths([2]), numpy.array([-1], dtype=dtype),
                                      extend_num_tokens=2)
                self.assertEqual((r.dtype, r.tolist()), (numpy.dtype(dtype), [8, 9]))
                r = pool.alloc_decode(lengths([3]), numpy.array([9], dtype=dtype))
                self.assertEqual((r.dtype, r.tolist()), (numpy.dtype(dtype), [10]))

    def test_default_extend_num_tokens_of_every_kind(self):
        for name, (make, installed) in host_kinds().items():
            with self.subTest(kind=name):
                if not installed:
                    self.skipTest(f"{name} is not installed")
                pool = self.pool(256, 4)
                got = pool.alloc_extend(make([0, 0], "q"), make([5, 2], "q"),
                                        make([-1, -1], "q"))
                self.assertEqual(as_list(got), [4, 5, 6, 7, 8, 12, 13])

    def test_wrong_buffers_are_refused_before_the_call(self):
        pool = self.pool(64, 4)
        pool32 = self.pool(64, 4, index_type=kvp.INDEX_TYPE_I32)
        pool.alloc(8)
        q = lambda values: array.array("q", values)  # noqa: E731
        calls = spy_calls(self, [n for n in kvp.SIGNATURES if n.startswith("kvp_pool_")
                                 and n not in ("kvp_pool_get_stats", "kvp_pool_available_size",
                                               "kvp_pool_free")])
        before = pool.stats().as_dict(), pool32.stats().as_dict()
        cases = [
            (TypeError, "typecode 'i'", pool.free_indices, (array.array("i", [4]),), {}),
            (TypeError, "typecode 'Q'", pool.alloc_decode, (array.array("Q", [5]), [4]), {}),
            (TypeError, "typecode 'q'", pool32.free_pages, (q([1]),), {}),
            (TypeError, "typecode 'd'", pool.alloc, (4,), {"out": array.array("d", [0] * 4)}),
            (TypeError, "format 'B'", pool.free_indices, (b"\x04\x00",), {}),
            (TypeError, "format 'B'", pool.free_indices, (bytearray(8),), {}),
            (TypeError, "format 'f'", pool.free_indices, (memoryview(array.array("f", [4])),),
             {}),
            (ValueError, "contiguous", pool.free_indices, (memoryview(q([4, 0, 5]))[::2],), {}),
            (ValueError, "1-D", pool.free_pages, (memoryview(q([1, 2])).cast("B").cast(
                "q", (1, 2)),), {}),
            (TypeError, "read-only", pool.alloc, (4,),
             {"out": memoryview(bytes(32)).cast("q")}),
            (TypeError, "tensor or a writable buffer", pool.alloc, (4,), {"out": [0] * 4}),
            (TypeError, "seq_lens[1] must be an integer, not float", pool.alloc_decode,
             ([5, 6.0], [4, 5]), {}),
            (TypeError, "indices[0] must be an integer, not str", pool.free_indices, (["4"],),
             {}),
            (ValueError, "one entry per request", pool.alloc_decode, (q([5, 6]), q([4])), {}),
        ]
        if numpy is not None:
            cases += [
                (TypeError, "format", pool.free_indices, (numpy.array([4], numpy.float64),), {}),
                (TypeError, "format", pool.free_indices, (numpy.array([4], numpy.uint64),), {}),
                (TypeError, "format", pool.free_indices, (numpy.array([4], numpy.int32),), {}),
                (TypeError, "format", pool32.free_indices, (numpy.array([4]),), {}),
                (ValueError, "contiguous", pool.free_indices, (numpy.array([4, 0, 5])[::2],),
                 {}),
                (ValueError, "1-D", pool.free_pages, (numpy.array([[1]]),), {}),
                (ValueError, "1-D", pool.free_pages, (numpy.array(1),), {}),
                (TypeError, "read-only", pool.alloc, (4,),
                 {"out": numpy.zeros(4, numpy.int64).view()}),
            ]
            cases[-1][4]["out"].flags.writeable = False
        for error, needle, call, args, kwargs in cases:
            with self.subTest(call=call.__name__, needle=needle):
                with self.assertRaises(error) as ctx:
                    call(*args, **kwargs)
                self.assertIn(needle, str(ctx.exception))
        self.assertEqual(calls, [])  # nothing reached the library
        self.assertEqual((pool.stats().as_dict(), pool32.stats().as_dict()), before)

    def test_read_only_inputs_are_copied(self):
        pool = self.pool(64, 4)
        got = pool.alloc_extend(memoryview(bytes(array.array("q", [0]))).cast("q"),
                                memoryview(bytes(array.array("q", [3]))).cast("q"),
                                memoryview(bytes(array.array("q", [-1]))).cast("q"))
        self.assertEqual(got.tolist(), [4, 5, 6])
        if numpy is not None:
            frozen = numpy.array([4, 5, 6])
            frozen.flags.writeable = False
            pool.free_indices(frozen)
        else:
            pool.free_indices(got)
        self.assertEqual(pool.available_size(), 64)

    def test_buffer_values_are_checked_by_the_library(self):
        """Buffers and tensors are not read element by element in Python: the library checks
        each length and index (signed, so a negative length is refused, not read as a
        huge unsigned one) and changes nothing."""
        pool = self.pool(64, 4)
        pool.alloc(8)
        q = lambda values: array.array("q", values)  # noqa: E731
        before = pool.available_size()
        self.assertKvpError("INVALID_LENGTHS", pool.alloc_extend, q([-1]), q([2]), q([-1]),
                            extend_num_tokens=3, message="prefix_lens[0]")
        self.assertKvpError("INVALID_LENGTHS", pool.alloc_extend, q([0]), q([-4]), q([-1]),
                            extend_num_tokens=0, message="seq_lens[0]")
        self.assertKvpError("INVALID_LENGTHS", pool.alloc_decode, q([-2]), q([4]),
                            message="seq_lens[0]")
        self.assertKvpError("INVALID_LENGTHS", pool.alloc_extend, q([0]), q([2**63 - 1]),
                            q([-1]), out_len=0, message="seq_lens[0]")
        self.assertKvpError("INDEX_OUT_OF_RANGE", pool.free_indices, q([-5]))
        self.assertKvpError("INDEX_OUT_OF_RANGE", pool.free_indices, q([2**63 - 1]))
        self.assertKvpError("DOUBLE_FREE", pool.free_indices, q([4, 4]))
        if numpy is not None:
            self.assertKvpError("INVALID_LENGTHS", pool.alloc_decode,
                                numpy.array([-2]), numpy.array([4]))
        self.assertEqual(pool.available_size(), before)

    def test_lists_still_name_the_element_out_of_range(self):
        pool = self.pool(64, 4)
        for values, needle in (([0, 2**63], "seq_lens[1] = 9223372036854775808"),
                               ((-2**63 - 1,), "seq_lens[0] = -9223372036854775809"),
                               (iter([1, 2**64]), "seq_lens[1] = 18446744073709551616")):
            with self.subTest(needle=needle):
                with self.assertRaises(OverflowError) as ctx:
                    pool.alloc_decode(values, [-1, -1])
                self.assertIn(needle, str(ctx.exception))
        pool32 = self.pool(64, 4, index_type=kvp.INDEX_TYPE_I32)
        with self.assertRaises(OverflowError) as ctx:
            pool32.free_indices([4, 2**31])
        self.assertIn("indices[1] = 2147483648 is out of range for int32_t", str(ctx.exception))

    def test_fast_functions_mirror_the_signatures(self):
        """lib.fast has every function with each pointer parameter as void * (what the hot
        methods call with addresses as ints) and otherwise SIGNATURES' types."""
        for name, (restype, argtypes) in kvp.SIGNATURES.items():
            if name in kvp.TESTING_FUNCTIONS and not LIB.has_testing:
                continue
            with self.subTest(function=name):
                fast = getattr(LIB.fast, name)
                self.assertIs(fast, LIB.fast_function(name))
                self.assertIsNot(fast, LIB.function(name))
                if name in kvp._native.CALLS and os.environ.get("KVPOOL_PYTHON_NATIVE") != "0":
                    # the library's builtin, taking the same ints (also with lib.python off)
                    self.assertIsInstance(fast, types.BuiltinFunctionType)
                    self.assertEqual(fast.__name__, name)
                    continue
                self.assertIs(fast.restype, restype)
                self.assertEqual(len(fast.argtypes), len(argtypes))
                for typed, plain in zip(argtypes, fast.argtypes):
                    pointer = issubclass(typed, (ctypes._Pointer, ctypes.c_void_p))
                    self.assertIs(plain, ctypes.c_void_p if pointer else typed)


class TestHostArrayKindsGeneralPath(TestHostArrayKinds):
    """TestHostArrayKinds with the library's Python entry points off (``lib.python =
    None``): the package's general path converts every buffer itself."""

    def setUp(self):
        self.assertIsNotNone(LIB.python, "the library's Python entry points did not load")
        native, LIB.python = LIB.python, None
        self.addCleanup(setattr, LIB, "python", native)


def spy_native(test):
    """Wraps ``LIB.python``'s entry points for the rest of `test`; returns the list of
    (name, status) of every call."""
    calls = []
    for name in kvp._native.ENTRY_POINTS:
        original = getattr(LIB.python, name)

        def wrapper(*args, _name=name, _original=original):
            status = _original(*args)
            calls.append((_name, status))
            return status

        setattr(LIB.python, name, wrapper)
        test.addCleanup(setattr, LIB.python, name, original)
    return calls


def random_free(rng, live):
    """A lockstep test's free: (the requests `taken`, 1-3 of `live`, and their slots), the
    first slot repeated one time in ten (a double free: refused, nothing freed)."""
    taken = rng.sample(range(len(live)), rng.randint(1, min(3, len(live))))
    slots = [slot for i in taken for slot in live[i]]
    if rng.random() < 0.1:
        slots.append(slots[0])
    return taken, slots


def track_requests(live, call, got, seq, picked, taken):
    """After a successful call of a lockstep test, `live` (each request's slots) as it
    changed: an alloc_extend of requests of `seq` tokens adds them, an alloc_decode grows
    the `picked` ones, a free_indices of the `taken` ones drops them."""
    if call == "alloc_extend":
        start = 0
        for length in seq:
            live.append(got[start:start + length])
            start += length
    elif call == "alloc_decode":
        for j, i in enumerate(picked):
            live[i].append(got[j])
    else:
        for i in sorted(set(taken), reverse=True):
            del live[i]


class TestNativeCalls(KvpTestCase):
    """The hot calls on buffers go through the library's Python entry points
    (src/ffi/python.rs), which read the buffers themselves; anything they do not take falls
    back, having changed nothing, to the general path, which gives the same results and
    errors."""

    FALLBACK = kvp._native.FALLBACK

    def setUp(self):
        self.assertIsNotNone(LIB.python, "the library's Python entry points did not load")

    def buffer_kinds(self):
        kinds = {"array": lambda values, code: array.array(code, values),
                 "memoryview": lambda values, code: memoryview(array.array(code, values))}
        if numpy is not None:
            kinds["numpy"] = lambda values, code: numpy.array(
                values, dtype=numpy.int64 if code == "q" else numpy.int32)
        return kinds

    def test_buffers_take_the_native_path(self):
        for index_type, code in ((kvp.INDEX_TYPE_I64, "q"), (kvp.INDEX_TYPE_I32, "i")):
            for kind, make in self.buffer_kinds().items():
                with self.subTest(kind=kind, index_type=index_type):
                    pool = self.pool(64, 4, index_type=index_type)
                    calls = spy_native(self)
                    out = make([-1] * 6, code)
                    got = pool.alloc_extend(make([0, 0], "q"), make([2, 3], "q"),
                                            make([-1, -1], code), 5, out=out)
                    self.assertEqual(as_list(got), [4, 5, 8, 9, 10])
                    self.assertEqual(as_list(out), [4, 5, 8, 9, 10, -1])
                    dec = make([0, 0], code)
                    self.assertIs(pool.alloc_decode(make([3, 4], "q"), make([5, 10], code),
                                                    out=dec), dec)
                    self.assertEqual(as_list(dec), [6, 11])
                    page = make([0] * 4, code)
                    self.assertIs(pool.alloc(4, out=page), page)
                    self.assertEqual(as_list(page), [12, 13, 14, 15])
                    pool.free_indices(make([12, 13, 14, 15], code))
                    self.assertEqual(pool.available_size(), 64 - 8)
                    # Without out=: a new output of the inputs' kind, through the library too.
                    new = pool.alloc_extend(make([0], "q"), make([3], "q"), make([-1], code), 3)
                    want_type = numpy.ndarray if kind == "numpy" else array.array
                    self.assertIsInstance(new, want_type)
                    self.assertEqual(as_list(new), [12, 13, 14])
                    new = pool.alloc_decode(make([4], "q"), make([14], code))
                    self.assertIsInstance(new, want_type)
                    self.assertEqual(as_list(new), [15])
                    # Without extend_num_tokens either: the library sums the lengths.
                    new = pool.alloc_extend(make([0, 4], "q"), make([2, 5], "q"),
                                            make([-1, 15], code))
                    self.assertEqual(as_list(new), [16, 17, 20])
                    self.assertEqual([name for name, _ in calls],
                                     ["kvp_python_pool_alloc_extend",
                                      "kvp_python_pool_alloc_decode", "kvp_python_pool_alloc",
                                      "kvp_python_pool_free_indices",
                                      "kvp_python_pool_alloc_extend",
                                      "kvp_python_pool_alloc_decode",
                                      "kvp_python_extend_tokens",
                                      "kvp_python_pool_alloc_extend"])
                    self.assertEqual([status for _, status in calls], [0] * 6 + [3, 0])

    def test_failed_calls_raise_as_the_general_path_does(self):
        q = lambda values: array.array("q", values)  # noqa: E731
        pool = self.pool(64, 4)
        calls = spy_native(self)
        self.assertKvpError("BUFFER_TOO_SMALL", pool.alloc_extend, q([0]), q([3]), q([-1]), 3,
                            out=q([0, 0]))
        self.assertKvpError("INVALID_LENGTHS", pool.alloc_extend, q([0]), q([3]), q([-1]), 4,
                            out=q([0] * 4))
        self.assertKvpError("OUT_OF_SLOTS", pool.alloc, 128, out=q([0] * 128))
        self.assertKvpError("INDEX_OUT_OF_RANGE", pool.free_indices, q([-5]))
        self.assertKvpError("NOT_ALLOCATED", pool.alloc_decode, q([2]), q([4]), out=q([0]))
        self.assertEqual([status for _, status in calls],
                         [kvp.STATUS[name] for name in ("BUFFER_TOO_SMALL", "INVALID_LENGTHS",
                                                        "OUT_OF_SLOTS", "INDEX_OUT_OF_RANGE",
                                                        "NOT_ALLOCATED")])
        self.assertEqual(pool.available_size(), 64)

    def test_what_the_entry_points_do_not_take_falls_back_unchanged(self):
        q = lambda values: array.array("q", values)  # noqa: E731
        pool = self.pool(64, 4)
        pool32 = self.pool(64, 4, index_type=kvp.INDEX_TYPE_I32)
        native = LIB.python
        read_only = memoryview(bytes(16)).cast("q")
        cases = [
            # (pool, entry point, arguments after the handle)
            (pool, "kvp_python_pool_free_indices", ([4],)),
            (pool, "kvp_python_pool_free_indices", ((4,),)),
            (pool, "kvp_python_pool_free_indices", (b"\x04\x00\x00\x00\x00\x00\x00\x00",)),
            (pool, "kvp_python_pool_free_indices", (bytearray(8),)),
            (pool, "kvp_python_pool_free_indices", (array.array("Q", [4]),)),
            (pool, "kvp_python_pool_free_indices", (array.array("d", [4]),)),
            (pool, "kvp_python_pool_free_indices", (array.array("i", [4]),)),
            (pool32, "kvp_python_pool_free_indices", (q([4]),)),
            (pool, "kvp_python_pool_free_indices", (memoryview(q([4, 0, 5]))[::2],)),
            (pool, "kvp_python_pool_free_indices",
             (memoryview(q([1, 2])).cast("B").cast("q", (1, 2)),)),
            (pool, "kvp_python_pool_free_indices", (None,)),
            (pool, "kvp_python_pool_free_indices", (4,)),
            (pool, "kvp_python_pool_alloc", (4, read_only)),
            (pool, "kvp_python_pool_alloc", (4, array.array("d", [0] * 4))),
            (pool, "kvp_python_pool_alloc_decode", (q([5, 6]), q([4]), q([0, 0]))),
            (pool, "kvp_python_pool_alloc_decode", (q([5]), q([4, 5]), q([0]))),
            (pool, "kvp_python_pool_alloc_extend", (q([0]), q([2, 3]), q([-1]), 2, q([0] * 8))),
            (pool, "kvp_python_pool_alloc_extend", (q([0]), q([2]), q([-1, -1]), 2, q([0] * 8))),
            (pool, "kvp_python_pool_alloc_extend",
             (q([0]), array.array("i", [2]), q([-1]), 2, q([0] * 8))),
            (pool32, "kvp_python_pool_alloc_extend", (q([0]), q([2]), q([-1]), 2, q([0] * 8))),
        ]
        if numpy is not None:
            frozen = numpy.zeros(4, numpy.int64)
            frozen.flags.writeable = False
            cases += [
                (pool, "kvp_python_pool_free_indices", (numpy.array([4], numpy.uint64),)),
                (pool, "kvp_python_pool_free_indices", (numpy.array([4], numpy.float64),)),
                (pool, "kvp_python_pool_free_indices", (numpy.array([[4]]),)),
                (pool, "kvp_python_pool_free_indices", (numpy.array(4),)),
                (pool, "kvp_python_pool_free_indices", (numpy.array([4, 0, 5])[::2],)),
                (pool, "kvp_python_pool_free_indices", (numpy.array([4], ">i8"),)),
                (pool, "kvp_python_pool_alloc", (4, frozen)),
            ]
        if torch is not None:
            cases.append((pool, "kvp_python_pool_free_indices", (torch.tensor([4]),)))
        before = [p.stats().as_dict() for p in (pool, pool32)]
        for target, name, args in cases:
            with self.subTest(entry=name, args=repr(args)[:80]):
                self.assertEqual(getattr(native, name)(target.handle, *args), self.FALLBACK)
        self.assertEqual([p.stats().as_dict() for p in (pool, pool32)], before)
        self.assertEqual((pool.available_size(), pool32.available_size()), (64, 64))

    @unittest.skipIf(numpy is None, "numpy is not installed")
    def test_a_0_d_array_without_out_is_named_by_the_general_path(self):
        pool = self.pool(64, 4)
        with self.assertRaises(ValueError) as ctx:
            pool.alloc_decode(numpy.array(5), numpy.array([4]))
        self.assertIn("1-D", str(ctx.exception))
        self.assertEqual(pool.available_size(), 64)

    def test_a_handle_that_is_no_host_pool_falls_back(self):
        pool = self.pool(64, 4)
        self.assertEqual(LIB.python.kvp_python_pool_free_indices(None, array.array("q", [4])),
                         self.FALLBACK)
        # A handle of another kind is refused by with_pool's tag check: falls back too.
        adder = self.adder(100)
        self.assertEqual(LIB.python.kvp_python_pool_free_indices(
            adder.handle, array.array("q", [4])), self.FALLBACK)
        self.assertEqual(pool.available_size(), 64)

    def test_the_library_sums_the_default_extend_num_tokens_as_the_package_does(self):
        q = lambda values: array.array("q", values)  # noqa: E731
        tokens = LIB.python.kvp_python_extend_tokens
        self.assertEqual(tokens(q([0, 4]), q([2, 9])), 7)
        self.assertEqual(tokens(q([]), q([])), 0)
        self.assertEqual(tokens(q([5]), q([2])), 0)  # negative: 0, the call names the length
        no_sum = kvp._native.NO_SUM
        self.assertEqual(tokens(q([0]), q([1, 2])), no_sum)  # lengths differ
        self.assertEqual(tokens(array.array("i", [0]), array.array("i", [1])), no_sum)
        self.assertEqual(tokens([0], [1]), no_sum)
        self.assertEqual(tokens(q([0, 0]), q([2**62, 2**62])), no_sum)  # past INT64_MAX
        self.assertEqual(tokens(q([-2**63, 0]), q([2**63 - 1, 2**63 - 1])), no_sum)
        pool = self.pool(64, 4)
        for native in (LIB.python, None):
            saved, LIB.python = LIB.python, native
            try:
                # past INT64_MAX the package sums; the library names the length
                self.assertKvpError("INVALID_LENGTHS", pool.alloc_extend, q([0, 0]),
                                    q([2**62, 2**62]), q([-1, -1]), out=q([0] * 4),
                                    message="seq_lens[0]")
                self.assertKvpError("INVALID_LENGTHS", pool.alloc_extend, q([5]), q([2]),
                                    q([3]), message="seq_lens[0]")
            finally:
                LIB.python = saved
        self.assertEqual(pool.available_size(), 64)

    def test_the_general_path_takes_the_default_extend_num_tokens_from_the_planning(self):
        """Without the entry points (lists, tensors, or lib.python off), the default
        extend_num_tokens comes from kvp_pool_extend_need, once a call (CPU tensors whose
        lengths it refuses: twice, their lane's and the general path's); where the planning
        refuses the lengths the package sums them itself and the allocation names the bad
        one, as before; lengths that disagree in count never reach it."""
        saved, LIB.python = LIB.python, None
        self.addCleanup(setattr, LIB, "python", saved)
        calls = spy_calls(self, ["kvp_pool_extend_need"])
        for name, (make, installed) in host_kinds().items():
            if not installed:
                continue
            with self.subTest(kind=name):
                q = lambda values: make(values, "q")  # noqa: E731
                pool, twin = self.pool(256, 4), self.pool(256, 4)
                for p in (pool, twin):
                    p.alloc_extend([0], [3], [-1], extend_num_tokens=3)  # slots 4-6
                del calls[:]
                got = pool.alloc_extend(q([0, 3]), q([5, 6]), q([-1, 6]))
                self.assertEqual(calls, ["kvp_pool_extend_need"])
                self.assertEqual(as_list(got), as_list(twin.alloc_extend(
                    q([0, 3]), q([5, 6]), q([-1, 6]), extend_num_tokens=8)))
                self.assertEqual(len(got), 8)
                # refused by the planning: summed here (to 0), named by the allocation
                self.assertKvpError("INVALID_LENGTHS", pool.alloc_extend, q([5]), q([2]),
                                    q([3]), message="seq_lens[0]")
                self.assertKvpError("INVALID_LENGTHS", pool.alloc_extend, q([0, 0]),
                                    q([2**62, 2**62]), q([-1, -1]),
                                    out=array.array("q", [0] * 4), message="seq_lens[0]")
                # CPU tensors ask the planning in their lane first, then again on the
                # general path where it refused
                asked = 5 if name == "torch" else 3
                self.assertEqual(len(calls), asked)
                with self.assertRaisesRegex(ValueError, "one entry per request"):
                    pool.alloc_extend(q([0]), q([1, 2]), q([-1]))
                self.assertEqual(len(calls), asked)
                self.assertEqual(pool.available_size(), twin.available_size())

    def test_threads_call_the_entry_points_at_once(self):
        """Four threads allocate and free through the entry points (each releases the GIL
        for its pool call, so they overlap in the library): every call succeeds or runs
        short of slots, and every slot comes back."""
        pool = self.pool(1 << 14, 16)
        errors, done = [], [0] * 4

        def worker(k):
            rng = random.Random(k)
            try:
                for _ in range(1500):
                    bs = rng.randint(1, 4)
                    seq = array.array("q", [rng.randint(1, 40) for _ in range(bs)])
                    try:
                        out = pool.alloc_extend(array.array("q", [0] * bs), seq,
                                                array.array("q", [-1] * bs), sum(seq))
                    except kvp.KvpError as err:
                        if err.name != "KVP_STATUS_OUT_OF_SLOTS":
                            raise
                        continue
                    pool.free_indices(out)
                    done[k] += 1
            except Exception as err:  # noqa: BLE001 - reported below
                errors.append(repr(err))

        calls = spy_native(self)
        threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        self.assertEqual(errors, [])
        self.assertGreater(sum(done), 4000)
        self.assertEqual(pool.available_size(), 1 << 14)
        self.assertNotIn(self.FALLBACK, [status for _, status in calls])

    def test_an_entry_point_called_without_the_gil_declines(self):
        """Through the CDLL function (which releases the GIL) an entry point must not touch
        the C API: it falls back, and the pool is unchanged."""
        pool = self.pool(64, 4)
        slots = pool.alloc(4)
        indices = array.array("q", slots)
        cdll = LIB.function("kvp_python_pool_free_indices")
        self.assertEqual(cdll(pool.handle, id(indices)), self.FALLBACK)
        self.assertEqual(pool.available_size(), 60)
        # with the GIL (LIB.python: a PyDLL function) the same call frees them
        self.assertEqual(LIB.python.kvp_python_pool_free_indices(pool.handle, indices), 0)
        self.assertEqual(pool.available_size(), 64)

    def test_read_only_inputs_are_read_in_place(self):
        pool = self.pool(64, 4)
        frozen = lambda values: memoryview(bytes(array.array("q", values))).cast("q")  # noqa: E731
        out = array.array("q", [0] * 3)
        status = LIB.python.kvp_python_pool_alloc_extend(
            pool.handle, frozen([0]), frozen([3]), frozen([-1]), 3, out)
        self.assertEqual(status, 0)
        self.assertEqual(out.tolist(), [4, 5, 6])
        self.assertEqual(LIB.python.kvp_python_pool_free_indices(pool.handle, frozen([4, 5, 6])),
                         0)
        self.assertEqual(pool.available_size(), 64)

    def test_the_entry_points_are_the_librarys_builtins(self):
        # Made from kvp_python_methods' table, not ctypes functions (whose argument
        # conversion cost about a microsecond a call).
        for name in kvp._native.ENTRY_POINTS:
            with self.subTest(entry=name):
                builtin = getattr(LIB.python, name)
                self.assertIsInstance(builtin, types.BuiltinFunctionType)
                self.assertEqual(builtin.__name__, name)

    def test_the_builtins_fall_back_on_arguments_they_cannot_convert(self):
        q = lambda values: array.array("q", values)  # noqa: E731
        pool = self.pool(64, 4)
        native = LIB.python
        cases = [
            ("kvp_python_pool_alloc", (pool.handle, 4)),  # an argument short
            ("kvp_python_pool_alloc", (pool.handle, 4, q([0] * 4), None)),  # one too many
            ("kvp_python_pool_alloc", ()),
            ("kvp_python_pool_alloc", (str(pool.handle), 4, q([0] * 4))),  # no int
            ("kvp_python_pool_alloc", (float(pool.handle), 4, q([0] * 4))),
            ("kvp_python_pool_alloc", (pool.handle, -4, q([0] * 4))),  # no size_t
            ("kvp_python_pool_alloc", (pool.handle, 2**64, q([0] * 4))),
            ("kvp_python_pool_alloc", (pool.handle, 4.0, q([0] * 4))),
            ("kvp_python_pool_alloc", (pool.handle, None, q([0] * 4))),
            ("kvp_python_pool_alloc", (2**64, 4, q([0] * 4))),
            ("kvp_python_pool_alloc_extend", (pool.handle, q([0]), q([4]), q([-1]), "4",
                                              q([0] * 4))),
            ("kvp_python_pool_alloc_extend_async", (pool.handle, q([0]), q([4]), 0, 0, 0, 1,
                                                    4, 0, 4, "stream")),
            ("kvp_python_pool_alloc_decode_async", (pool.handle, q([4]), 0, 0, 1, 0, 1)),
        ]
        for name, args in cases:
            with self.subTest(entry=name, args=repr(args)[:80]):
                self.assertEqual(getattr(native, name)(*args), self.FALLBACK)
        self.assertEqual(native.kvp_python_extend_tokens(q([0])), kvp._native.NO_SUM)
        self.assertEqual(native.kvp_python_extend_tokens("a", 1, 2), kvp._native.NO_SUM)
        self.assertEqual(pool.available_size(), 64)
        # no exception was left set: the same builtin then works
        out = q([0] * 4)
        self.assertEqual(native.kvp_python_pool_alloc(pool.handle, 4, out), 0)
        self.assertEqual(out.tolist(), [4, 5, 6, 7])

    def test_the_c_functions_builtins_raise_on_arguments_they_cannot_convert(self):
        # lib.fast's builtins (_native.CALLS) take the C function's arguments as ints; a
        # wrong count or an argument that is no such int raises, having called nothing.
        pool = self.pool(64, 4)
        alloc = LIB.fast.kvp_pool_alloc
        self.assertIsInstance(alloc, types.BuiltinFunctionType)
        out = array.array("q", [0] * 4)
        address = out.buffer_info()[0]
        with self.assertRaises(TypeError) as ctx:
            alloc(pool.handle, 4, address)
        self.assertIn("kvp_pool_alloc takes 4 arguments (3 given)", str(ctx.exception))
        for args, error in (((pool.handle, -4, address, 4), OverflowError),
                            ((pool.handle, 2**64, address, 4), OverflowError),
                            ((pool.handle, 4.0, address, 4), TypeError),
                            ((pool.handle, 4, "out", 4), TypeError),
                            ((str(pool.handle), 4, address, 4), TypeError)):
            with self.subTest(args=args):
                with self.assertRaises(error):
                    alloc(*args)
        self.assertEqual(pool.available_size(), 64)
        self.assertEqual(out.tolist(), [0] * 4)
        # None is NULL, as through ctypes: the library names it
        self.assertEqual(alloc(pool.handle, 4, None, 4), kvp.STATUS["NULL_ARGUMENT"])
        self.assertEqual(alloc(pool.handle, 4, address, 4), 0)
        self.assertEqual(out.tolist(), [4, 5, 6, 7])

    def test_methods_keep_the_first_functions(self):
        dll = ctypes.PyDLL(LIB.path)
        methods = dll.kvp_python_methods
        methods.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t,
                            ctypes.POINTER(ctypes.c_void_p)]
        methods.restype = ctypes.c_int32
        api = [ctypes.cast(getattr(ctypes.pythonapi, name), ctypes.c_void_p).value
               for name in kvp._native._INT_API] + [id(None), id(TypeError)]

        def call(addresses, out, n=None):
            array_ = (ctypes.c_void_p * len(addresses))(*addresses)
            return methods(array_, len(addresses) if n is None else n, out)

        first, again = ctypes.c_void_p(), ctypes.c_void_p()
        self.assertEqual(call(api, ctypes.byref(first)), 0)
        self.assertEqual(call(api, ctypes.byref(again)), 0)  # a no-op: the same table
        self.assertEqual(first.value, again.value)
        untouched = ctypes.c_void_p(12345)
        self.assertEqual(call(api[:5] + [None] + api[6:], ctypes.byref(untouched)),
                         kvp.STATUS["NULL_ARGUMENT"])
        self.assertEqual(call(api, None), kvp.STATUS["NULL_ARGUMENT"])
        # another count: a package of another version
        self.assertEqual(call(api + [id(None)], ctypes.byref(untouched)),
                         kvp.STATUS["INVALID_ARGUMENT"])
        self.assertIn("8 addresses given, this library takes 7", LIB.last_error_message())
        self.assertEqual(call(api[:6], ctypes.byref(untouched)), kvp.STATUS["INVALID_ARGUMENT"])
        swapped = [api[1], api[0]] + api[2:]
        self.assertEqual(call(swapped, ctypes.byref(untouched)), kvp.STATUS["INVALID_STATE"])
        self.assertIn("other Python C-API functions", LIB.last_error_message())
        self.assertEqual(untouched.value, 12345)
        # and the builtins still work
        pool = self.pool(64, 4)
        out = array.array("q", [0] * 4)
        self.assertEqual(LIB.python.kvp_python_pool_alloc(pool.handle, 4, out), 0)
        self.assertEqual(out.tolist(), [4, 5, 6, 7])

    def test_init_keeps_the_first_functions(self):
        dll = ctypes.PyDLL(LIB.path)
        init = dll.kvp_python_init
        init.argtypes = [ctypes.c_void_p] * 6
        init.restype = ctypes.c_int32
        api = [ctypes.cast(getattr(ctypes.pythonapi, name), ctypes.c_void_p).value
               for name in kvp._native._API]
        self.assertEqual(init(*api), 0)  # the same functions again: a no-op
        self.assertEqual(init(*api[:5], None), kvp.STATUS["NULL_ARGUMENT"])
        swapped = [api[1], api[0]] + api[2:]
        self.assertEqual(init(*swapped), kvp.STATUS["INVALID_STATE"])
        self.assertIn("other Python C-API functions", LIB.last_error_message())
        # and the entry points still work
        pool = self.pool(64, 4)
        out = array.array("q", [0] * 4)
        self.assertEqual(LIB.python.kvp_python_pool_alloc(pool.handle, 4, out), 0)
        self.assertEqual(out.tolist(), [4, 5, 6, 7])

    def test_random_calls_match_the_general_path(self):
        """Two pools in lockstep, one through the entry points, one through the general path:
        the same results, the same errors, the same stats, over random batches (some too long
        for the pool, some with a too short out, some freeing twice)."""
        rng = random.Random(20261202)
        kinds = list(self.buffer_kinds().items())
        for index_type, code in ((kvp.INDEX_TYPE_I64, "q"), (kvp.INDEX_TYPE_I32, "i")):
            pools = [self.pool(512, 4, index_type=index_type) for _ in range(2)]
            calls = spy_native(self)
            live = []  # the slots of each request
            seq = picked = taken = None  # what the step's call was for (track_requests)
            for step in range(400):
                kind, make = rng.choice(kinds)
                op = rng.choice(("extend", "extend", "decode", "alloc", "free", "free"))
                if op == "extend" or not live:
                    bs = rng.randint(0, 4)
                    prefix = [0] * bs
                    seq = [rng.randint(1, 40) for _ in range(bs)]
                    n = sum(seq)
                    out_len = n if rng.random() < 0.9 else max(n - 1, 0)
                    given = n if rng.random() < 0.7 else None  # None: the default sum
                    args = lambda: (make(prefix, "q"), make(seq, "q"), make([-1] * bs, code),  # noqa: E731
                                    given)
                    call = "alloc_extend"
                elif op == "decode":
                    picked = rng.sample(range(len(live)), rng.randint(1, min(4, len(live))))
                    seq = [len(live[i]) + 1 for i in picked]
                    last = [live[i][-1] for i in picked]
                    out_len = len(picked)
                    args = lambda: (make(seq, "q"), make(last, code))  # noqa: E731
                    call = "alloc_decode"
                elif op == "alloc":
                    n = rng.choice((4, 8, 16))
                    out_len = n
                    args = lambda: (n,)  # noqa: E731
                    call = "alloc"
                else:
                    taken, slots = random_free(rng, live)
                    args = lambda: (make(slots, code),)  # noqa: E731
                    call = "free_indices"
                outcomes = []
                for p, native in zip(pools, (LIB.python, None)):
                    saved, LIB.python = LIB.python, native
                    try:
                        kwargs = {}
                        if call != "free_indices":
                            kwargs["out"] = make([-1] * out_len, code)
                        got = getattr(p, call)(*args(), **kwargs)
                        outcomes.append(("ok", None if got is None else as_list(got)))
                    except kvp.KvpError as err:
                        outcomes.append(("error", err.name, err.message))
                    finally:
                        LIB.python = saved
                with self.subTest(step=step, call=call, kind=kind):
                    self.assertEqual(outcomes[0], outcomes[1])
                if outcomes[0][0] == "ok":
                    if call != "alloc":
                        track_requests(live, call, outcomes[0][1], seq, picked, taken)
                    else:
                        pools[0].free_indices(make(outcomes[0][1], code))
                        pools[1].free_indices(make(outcomes[0][1], code))
                self.assertEqual(pools[0].stats().as_dict(), pools[1].stats().as_dict())
                self.assertEqual(pools[0].available_size(), pools[1].available_size())
            statuses = [status for _, status in calls]
            self.assertGreater(statuses.count(0), 100)
            self.assertGreater(len([s for s in statuses if s > 0]), 5)
            self.assertNotIn(self.FALLBACK, statuses)


class TestDebugOptions(KvpTestCase):
    """kvp_pool_set_debug on a host pool (accepted, ignored), unknown flags, and the
    stream-ordered release count (the device behaviour: tests/cuda_contract.rs)."""

    def test_host_pool_accepts_and_ignores_debug_flags(self):
        pool = self.pool(64, page_size=4)
        pool.set_debug(kvp.DEBUG_STREAM_ORDER)
        self.assertEqual(pool.debug_flags(), 0)
        self.assertEqual(list(pool.alloc(4)), [4, 5, 6, 7])
        with self.assertRaises(kvp.KvpError) as ctx:
            pool.set_debug(1 << 7)
        self.assertEqual(ctx.exception.name, "KVP_STATUS_INVALID_ARGUMENT")
        self.assertIn("unknown kvp_debug flags 0x80", str(ctx.exception))
        pool.set_debug(0)

    def test_flags_out_of_range_are_refused_before_the_call(self):
        pool = self.pool(64, page_size=4)
        for flags in (2**32 + 1, -1):  # not 1, not 0xffffffff
            with self.assertRaises(OverflowError) as ctx:
                pool.set_debug(flags)
            self.assertIn(f"flags = {flags} is out of range for uint32_t", str(ctx.exception))
        self.assertEqual(pool.debug_flags(), 0)

    def test_pending_releases_and_the_new_status(self):
        self.assertEqual(kvp.device_pending_releases(LIB), 0)  # no device pool here
        self.assertEqual(kvp.STATUS["UNORDERED_STREAMS"], 64)
        self.assertIn("not ordered", LIB.status_str(64))


class TestDecodeReservation(KvpTestCase):
    """Multi-step decode reservations on a host pool against plain decodes on a twin pool
    (the device path: tests/cuda_reservation.rs and tests/python/test_cuda.py)."""

    def test_reserved_steps_equal_plain_decodes(self):
        a, b = self.pool(64 * 4, 4), self.pool(64 * 4, 4)
        slots = list(a.alloc_extend([0, 0], [5, 8], [-1, -1]))
        self.assertEqual(list(b.alloc_extend([0, 0], [5, 8], [-1, -1])), slots)
        last = [slots[4], slots[12]]
        res = a.reserve_decode([5, 8], last, 6)
        self.assertEqual((res.steps, res.batch_size, res.pages), (6, 2, 3))
        data = array.array("i", bytes(4 * 2 * 20))
        table = kvp.ReqTable(data.buffer_info()[0], kvp.INDEX_TYPE_I32, 2, 20, 20)
        for s in range(4):
            got = list(res.step(table=table, rows=[1, 0]) if s < 2 else res.step())
            want = list(b.alloc_decode([6 + s, 9 + s], last))
            self.assertEqual(got, want)
            if s < 2:
                self.assertEqual([data[20 + 5 + s], data[8 + s]], want)
            last = want
        # a plain decode continuing, or a free of, a reserved request's page: held
        self.assertKvpError("INVALID_STATE", a.alloc_decode, [10, 13], last,
                            message="held by a live decode reservation")
        self.assertKvpError("INVALID_STATE", a.free_indices, last,
                            message="held by a live decode reservation")
        self.assertKvpError("INVALID_ARGUMENT", a.finish_reservation, res, 3,
                            message="steps_used = 3")
        a.finish_reservation(res, 4)
        self.assertEqual(a.digest(), b.digest())
        self.assertEqual(a.available_size(), b.available_size())
        self.assertKvpError("INVALID_STATE", a.finish_reservation, res, 4)
        self.assertKvpError("INVALID_STATE", res.step)
        res.close()

    def test_shortage_and_overrun(self):
        pool = self.pool(16 * 4, 4)
        slots = list(pool.alloc_extend([0], [3], [-1]))
        pool.alloc(8)  # 13 pages left; 61 steps from 3 tokens need 15
        before = pool.digest()
        self.assertKvpError("OUT_OF_SLOTS", pool.reserve_decode, [3], [slots[2]], 61)
        self.assertEqual(pool.digest(), before)
        with pool.reserve_decode([3], [slots[2]], 2) as res:
            res.step()
            res.step()
            self.assertKvpError("INVALID_STATE", res.step, message="overrun")
            pool.finish_reservation(res, 2)
        self.assertKvpError("WRONG_BACKEND", pool.reserve_decode_async, None, None, 2,
                            lens_host=[3], stream=0)


class TestReqTable(KvpTestCase):
    """Request-to-token tables: by-row allocation, frees and FlashInfer page tables."""

    def table(self, rows, row_len, stride, typecode="i"):
        data = array.array(typecode, bytes(array.array(typecode).itemsize * rows * stride))
        index_type = kvp.INDEX_TYPE_I32 if typecode == "i" else kvp.INDEX_TYPE_I64
        return data, kvp.ReqTable(data.buffer_info()[0], index_type, rows, stride, row_len)

    def test_rows_calls(self):
        pool = self.pool(64 * 4, 4)
        data, t = self.table(6, 30, 32)
        out = pool.alloc_extend_rows(t, [4, 1], [0, 0], [6, 3])
        self.assertEqual(list(data[4 * 32:4 * 32 + 6]) + list(data[32:35]), list(out))
        self.assertIsNone(pool.alloc_decode_rows(t, [4, 1], [7, 4], out_cache_loc=False))
        self.assertEqual(data[4 * 32 + 6], data[4 * 32 + 5] + 1)
        indptr, indices, last = pool.page_table(t, [4, 1], [7, 4])
        self.assertEqual(list(indptr), [0, 2, 3])
        self.assertEqual(list(last), [3, 4])
        self.assertEqual(list(indices), [data[4 * 32] // 4, data[4 * 32 + 4] // 4, data[32] // 4])
        again = pool.page_table(t, iter([4, 1]), (n for n in [7, 4]))  # read once each
        self.assertEqual([list(a) for a in again], [list(indptr), list(indices), list(last)])
        before = bytes(data)
        self.assertKvpError("INVALID_ARGUMENT", pool.alloc_decode_rows, t, [1, 1], [5, 5],
                            message="repeats")
        self.assertKvpError("INDEX_OUT_OF_RANGE", pool.alloc_decode_rows, t, [6], [1])
        self.assertEqual(bytes(data), before)
        pool.free_rows(t, [4, 1], [0, 0], [7, 4])
        self.assertEqual(pool.available_size(), 64 * 4)

    @unittest.skipIf(numpy is None, "numpy is not installed")
    def test_numpy_table(self):
        pool = self.pool(64, 1)
        table = numpy.zeros((3, 10), dtype=numpy.int64)
        pool.alloc_extend_rows(table, [2], [0], [4])
        self.assertEqual(list(table[2, :4]), [1, 2, 3, 4])

    def test_page_table_lengths_past_the_rows_are_the_librarys_to_name(self):
        # page_table sized kv_indices from seq_lens before the call: a length past the
        # table's rows (2**40) raised MemoryError instead of the library's refusal.
        pool = self.pool(64, 4)
        data, t = self.table(2, 16, 16)
        pool.alloc_extend_rows(t, [0], [0], [5])
        for seq_lens in ([2**40], [5, 2**62], [2**63 - 1]):
            with self.subTest(seq_lens=seq_lens):
                self.assertKvpError("BUFFER_TOO_SMALL", pool.page_table, t,
                                    [0] * len(seq_lens), seq_lens, message="row_len 16")
        indptr, indices, last = pool.page_table(t, [0], [5])
        self.assertEqual((list(indptr), list(last)), ([0, 2], [1]))
        self.assertEqual(list(indices), [data[0] // 4, data[4] // 4])

    @unittest.skipIf(numpy is None, "numpy is not installed")
    def test_numpy_table_with_rows_in_reverse_order(self):
        # A negative row stride (table[::-1]) went to C wrapped to 2**64 - 16: refused by
        # the library only as "the table's size overflows". A one-row view's stride is never
        # used, whatever its sign.
        pool = self.pool(64, 4)
        table = numpy.zeros((3, 16), dtype=numpy.int64)
        calls = spy_calls(self, ["kvp_pool_alloc_extend_rows", "kvp_pool_page_table"])
        with self.assertRaises(ValueError) as ctx:
            pool.alloc_extend_rows(table[::-1], [0], [0], [3])
        self.assertIn("row stride", str(ctx.exception))
        with self.assertRaises(ValueError):
            pool.page_table(table[::-1], [0], [0])
        self.assertEqual(calls, [])
        self.assertEqual(pool.available_size(), 64)
        one_row = table[::-1][:1]  # row 2 of the table, with a negative stride
        self.assertLess(one_row.strides[0], 0)
        got = pool.alloc_extend_rows(one_row, [0], [0], [3])
        self.assertEqual(list(table[2, :3]), list(got))

    def test_device_calls_on_a_host_pool(self):
        pool = self.pool(64, 4)
        _, t = self.table(2, 8, 8)
        self.assertKvpError("WRONG_BACKEND", pool.alloc_decode_rows_async, t, None, None,
                            seq_lens_host=[1], stream=0)
        self.assertKvpError("WRONG_BACKEND", pool.reserve_scratch_async, 2, 8, 64)


class TestPreparedCalls(KvpTestCase):
    """Pool.prepare_alloc_extend / prepare_alloc_decode: the buffers checked once, the batch
    per call; the same slots as the plain calls, and nothing read or written outside the
    prepared buffers."""

    CAP = 48

    def kinds(self):
        kinds = {"array": lambda n: array.array("q", [0]) * n,
                 "memoryview": lambda n: memoryview(array.array("q", [0]) * n)}
        if torch is not None:
            kinds["torch"] = lambda n: torch.zeros(n, dtype=torch.int64)
        if numpy is not None:
            kinds["numpy"] = lambda n: numpy.zeros(n, dtype=numpy.int64)
        return kinds

    def test_prepared_calls_give_the_plain_calls_slots(self):
        for name, make in self.kinds().items():
            for page_size in (1, 16):
                with self.subTest(kind=name, page_size=page_size):
                    self.run_rounds(make, page_size, random.Random(7 + page_size))

    def run_rounds(self, make, page_size, rng):
        plain, pool = self.pool(1 << 16, page_size), self.pool(1 << 16, page_size)
        prefix, seq, last = make(self.CAP), make(self.CAP), make(self.CAP)
        out = make(self.CAP * 64)
        extend = pool.prepare_alloc_extend(prefix, seq, last, out)
        decode = pool.prepare_alloc_decode(seq, last, out)
        self.assertEqual((extend.capacity, extend.out_len), (self.CAP, self.CAP * 64))
        rows = []  # each request's slots
        for _ in range(30):
            # An extend of some rows (continued) and some new requests.
            batch = [(i, len(rows[i])) for i in rng.sample(range(len(rows)),
                                                           min(len(rows), rng.randint(0, 8)))]
            batch += [(None, 0)] * rng.randint(1, 6)
            lens = [(p, p + rng.randint(1, 40)) for _, p in batch]
            lasts = [rows[i][-1] if i is not None else -1 for i, _ in batch]
            for k, ((p, q), l) in enumerate(zip(lens, lasts)):
                prefix[k], seq[k], last[k] = p, q, l
            tokens = sum(q - p for p, q in lens)
            want = plain.alloc_extend([p for p, _ in lens], [q for _, q in lens], lasts)
            self.assertIsNone(extend(len(batch), tokens))
            self.assertEqual([int(x) for x in out[:tokens]], want)
            at = 0
            for (i, _), (p, q) in zip(batch, lens):
                slots = want[at:at + q - p]
                at += q - p
                if i is None:
                    rows.append(slots)
                else:
                    rows[i].extend(slots)
            # A decode step of some rows.
            picked = rng.sample(range(len(rows)), min(len(rows), rng.randint(1, self.CAP)))
            for k, i in enumerate(picked):
                seq[k], last[k] = len(rows[i]) + 1, rows[i][-1]
            want = plain.alloc_decode([len(rows[i]) + 1 for i in picked],
                                      [rows[i][-1] for i in picked])
            self.assertIsNone(decode(len(picked)))
            self.assertEqual([int(x) for x in out[:len(picked)]], want)
            for i, slot in zip(picked, want):
                rows[i].append(slot)
            self.assertEqual(pool.available_size(), plain.available_size())

    def test_refusals_change_nothing(self):
        pool = self.pool(4096, 16)
        seq, last = array.array("q", [5, 5]), array.array("q", [-1, -1])
        prefix, out = array.array("q", [0, 0]), array.array("q", [0]) * 16
        with self.assertRaisesRegex(TypeError, "a prepared call reads the caller's memory"):
            pool.prepare_alloc_extend([0, 0], seq, last, out)
        with self.assertRaisesRegex(TypeError, "a prepared call reads the caller's memory"):
            pool.prepare_alloc_decode(memoryview(bytes(16)).cast("q"), last, out)
        extend = pool.prepare_alloc_extend(prefix, seq, last, out)
        available = pool.available_size()
        with self.assertRaisesRegex(ValueError, r"batch = 3 is outside \[0, 2\]"):
            extend(3, 10)
        with self.assertRaisesRegex(TypeError, "batch must be an int"):
            extend(2.0, 10)
        with self.assertRaisesRegex(ValueError, "extend_num_tokens = -1 is negative"):
            extend(2, -1)
        self.assertKvpError("INVALID_LENGTHS", extend, 2, 20)  # the library's own checks
        self.assertEqual(pool.available_size(), available)
        self.assertEqual(list(out), [0] * 16)
        with self.assertRaises(BufferError):  # the prepared call holds the arrays' memory
            seq.append(1)
        self.assertKvpError("WRONG_BACKEND", pool.prepare_alloc_decode_async, seq, last, out,
                            seq_lens_host=seq)
        extend(2, 10)
        self.assertEqual(list(out[:10]), [16, 17, 18, 19, 20, 32, 33, 34, 35, 36])
        pool.close()
        with self.assertRaisesRegex(ValueError, "closed"):
            extend(2, 10)

    def test_extend_num_tokens_that_do_not_fit_size_t_are_refused(self):
        # Through lib.fast's ctypes function (KVPOOL_PYTHON_NATIVE=0) 2**64 + 10 wrapped to
        # 10 and the call allocated; through the library's builtin it raised an
        # OverflowError that named no argument.
        name = "kvp_pool_alloc_extend"
        restype, argtypes = kvp.SIGNATURES[name]
        ctypes_function = ctypes.CDLL(LIB.path)[name]
        ctypes_function.restype = restype
        ctypes_function.argtypes = [kvp._address_type(t) for t in argtypes]
        for function in (LIB.fast_function(name), ctypes_function):
            with self.subTest(function=type(function).__name__):
                saved = getattr(LIB.fast, name)
                setattr(LIB.fast, name, function)
                try:
                    pool = self.pool(4096, 16)
                    prefix, seq = array.array("q", [0, 0]), array.array("q", [5, 5])
                    last, out = array.array("q", [-1, -1]), array.array("q", [0]) * 16
                    extend = pool.prepare_alloc_extend(prefix, seq, last, out)
                finally:
                    setattr(LIB.fast, name, saved)
                for tokens in (2**64 + 10, 2**70):
                    with self.assertRaises(OverflowError) as ctx:
                        extend(2, tokens)
                    self.assertIn(f"extend_num_tokens = {tokens} is out of range for size_t",
                                  str(ctx.exception))
                self.assertEqual(pool.available_size(), 4096)
                self.assertEqual(pool.stats().alloc_extend_calls, 0)
                self.assertEqual(list(out), [0] * 16)
                extend(2, 10)
                self.assertEqual(list(out[:10]), [16, 17, 18, 19, 20, 32, 33, 34, 35, 36])

    @unittest.skipIf(torch is None, "torch is not installed")
    def test_a_tensor_whose_memory_moved_is_refused(self):
        pool = self.pool(4096, 16)
        seq, last = torch.tensor([1, 1]), torch.tensor([-1, -1])
        out = torch.zeros(2, dtype=torch.int64)
        decode = pool.prepare_alloc_decode(seq, last, out)
        available = pool.available_size()
        out.set_(torch.zeros(64, dtype=torch.int64))
        with self.assertRaisesRegex(ValueError, "memory moved since the preparation"):
            decode(2)
        self.assertEqual(pool.available_size(), available)
        self.assertEqual(out.tolist(), [0] * 64)


if __name__ == "__main__":
    unittest.main()
