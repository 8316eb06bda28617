"""kvpool's public API used as an engine uses it, with static types: scripts/check-types.sh
type-checks this file with ``mypy --strict`` against the package's stub
(python/kvpool/__init__.pyi), whose result types the ``assert_type`` calls pin down. It is a
real program too, checking the library's answers:

    KVPOOL_LIB=/abs/path/libkvpool.so python3 tests/python/typed_usage.py    # prints OK

Standard library only (array.array buffers and lists: numpy and torch are optional).
"""

import array
import os
import sys

if sys.version_info >= (3, 11):
    from typing import assert_type
else:  # a no-op at run time, as typing's is
    from typing import Any, TypeVar

    _T = TypeVar("_T")

    def assert_type(value: _T, expected: Any, /) -> _T:
        return value

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "python"))

import kvpool  # noqa: E402


def host_pool(lib: kvpool.Library) -> None:
    """A paged host pool through one engine's steps: prefill, decode, frees, a snapshot."""
    with kvpool.Pool(64, page_size=4, lib=lib) as pool:
        assert_type(pool, kvpool.Pool)
        info = pool.info()
        assert_type(info, kvpool.PoolInfo)
        assert (info.size, info.page_size, info.num_pages) == (64, 4, 16)
        assert not pool.is_device and pool.device is None

        # Prefill two requests of 3 and 5 tokens (no cached prefix): first what it takes.
        need = pool.extend_need([0, 0], [3, 5])
        assert_type(need, kvpool.ExtendNeed)
        assert need == (3, 8) and need.pages * pool.page_size <= pool.available_size()
        slots = pool.alloc_extend([0, 0], [3, 5], [-1, -1], extend_num_tokens=need.tokens)
        assert_type(slots, list[int])  # lists in, a list out
        assert slots == [4, 5, 6, 8, 9, 10, 11, 12], slots  # pages 1, 2, 3 (page 0: never)
        assert pool.available_size() == 64 - 3 * 4

        # Decode one token each, from buffers (no list conversion): an array.array out.
        seq_lens = array.array("q", [4, 6])
        last_loc = array.array("q", [slots[2], slots[7]])
        assert pool.decode_need(seq_lens) == 0  # both fit in their last pages
        decoded = pool.alloc_decode(seq_lens, last_loc)
        assert_type(decoded, "array.array[int]")
        assert list(decoded) == [7, 13]

        # Next step into a preallocated out_cache_loc of room for 4: its written prefix.
        out_cache_loc = array.array("q", [0] * 4)
        seq_lens = array.array("q", [5, 7])
        last_loc = array.array("q", decoded)
        step = pool.alloc_decode(seq_lens, last_loc, out=out_cache_loc)
        assert_type(step, "array.array[int] | memoryview")
        assert isinstance(step, memoryview) and step.tolist() == [16, 14]  # 16: a new page
        assert list(out_cache_loc) == [16, 14, 0, 0]

        # A snapshot: allocate, roll back, the same slots again.
        with pool.backup_state() as snapshot:
            assert_type(snapshot, kvpool.Snapshot)
            taken = pool.alloc(8)
            assert_type(taken, list[int])
            pool.restore_state(snapshot)
            assert pool.alloc(8) == taken == list(range(20, 28))
        assert snapshot.closed
        pool.free_indices(array.array("q", taken))

        # Both requests finish: their slots go back in one free group.
        with pool.free_group() as group:
            assert_type(group, kvpool.Pool)
            pool.free_indices(slots[:3] + [decoded[0]])
            pool.free_indices(array.array("q", slots[3:] + [decoded[1]] + step.tolist()))
        assert pool.available_size() == 64

        try:
            pool.free_indices([slots[0]])
        except kvpool.KvpError as e:
            assert_type(e.status, int)
            assert (e.name, e.status) == ("KVP_STATUS_DOUBLE_FREE", kvpool.STATUS["DOUBLE_FREE"])
        else:
            raise AssertionError("a double free was accepted")

        stats = pool.stats()
        assert_type(stats.alloc_extend_calls, int)
        assert stats.alloc_extend_calls == 1 and stats.restores == 1
        assert stats.pages_in_use == 0 and stats.rejected_calls == 1


def prepared_decode(lib: kvpool.Library) -> None:
    """A decode loop over persistent buffers: the call prepared once, the batch per step."""
    with kvpool.Pool(64, lib=lib) as pool:  # a token pool: slots handed out in order
        first = pool.alloc(2)
        assert first == [1, 2]
        seq_lens = array.array("q", [2, 2, 0])
        last_loc = array.array("q", first + [0])
        out_cache_loc = array.array("q", [0, 0, 0])
        decode = pool.prepare_alloc_decode(seq_lens, last_loc, out_cache_loc)
        assert decode.capacity == 3 and decode.out is out_cache_loc
        for step in range(3):
            assert_type(decode(2), None)
            assert list(out_cache_loc) == [3 + 2 * step, 4 + 2 * step, 0]
            last_loc[:2] = out_cache_loc[:2]
            seq_lens[0] += 1
            seq_lens[1] += 1
        assert pool.available_size() == 64 - 2 - 3 * 2


def request_table(lib: kvpool.Library) -> None:
    """SGLang's req_to_token over caller memory (a ReqTable), and FlashInfer's page table."""
    with kvpool.Pool(64 * 4, page_size=4, lib=lib) as pool:
        rows, row_len = 3, 16
        memory = array.array("q", [0] * (rows * row_len))
        table = kvpool.ReqTable(memory.buffer_info()[0], kvpool.INDEX_TYPE_I64, rows, row_len,
                                row_len)
        out = pool.alloc_extend_rows(table, [2, 0], [0, 0], [6, 3])
        assert_type(out, list[int])
        assert out == memory[2 * row_len:2 * row_len + 6].tolist() + memory[0:3].tolist()
        assert_type(pool.alloc_decode_rows(table, [2, 0], [7, 4], out_cache_loc=False), None)
        indptr, indices, last = pool.page_table(table, [2, 0], [7, 4])
        assert_type(indices, "array.array[int]")
        assert list(indptr) == [0, 2, 3] and list(last) == [3, 4]
        assert list(indices) == [memory[2 * row_len] // 4, memory[2 * row_len + 4] // 4,
                                 memory[0] // 4]
        pool.free_rows(table, [2, 0], [0, 0], [7, 4])
        assert pool.available_size() == 64 * 4


def scheduler(lib: kvpool.Library) -> None:
    """Continuous batching: submit, a prefill step, a decode step, finish."""
    with kvpool.Pool(4096, page_size=16, lib=lib) as pool, \
            kvpool.Scheduler(pool, chunked_prefill_size=4096, lib=lib) as sched:
        assert sched.config.chunked_prefill_size == 4096
        result = sched.submit(1, input_len=100, max_new_tokens=20)
        assert_type(result, kvpool.SubmitResult)
        assert result.queued and result.capacity == 4096
        assert sched.submit(2, input_len=40, max_new_tokens=4, priority=1).queued

        plan = sched.step()
        assert_type(plan, kvpool.StepPlan)
        assert plan.kind == kvpool.STEP_KIND_PREFILL and plan.kind_name == "PREFILL"
        assert plan.prefill == [kvpool.PrefillEntryT(1, 0, 100, False),
                                kvpool.PrefillEntryT(2, 0, 40, False)]
        kv: dict[int, list[int]] = {}
        for entry in plan.prefill:
            assert_type(entry, kvpool.PrefillEntryT)
            kv[entry.id] = pool.alloc_extend([entry.prefix_len],
                                             [entry.prefix_len + entry.extend_len], [-1])

        plan = sched.step()
        assert plan.kind == kvpool.STEP_KIND_DECODE and plan.decode == [1, 2]
        assert_type(plan.evicted, list[kvpool.EvictedT])
        assert not plan.evicted
        seq_lens = [len(kv[i]) + 1 for i in plan.decode]
        new = pool.alloc_decode(seq_lens, [kv[i][-1] for i in plan.decode])
        for i, slot in zip(plan.decode, new):
            kv[i].append(slot)
        state = sched.request(1)
        assert state.phase == kvpool.PHASE_RUNNING and state.kv_len == 101

        done = sched.finish_ex(2)
        assert_type(done, kvpool.Finished)
        assert (done.id, done.kv_len, done.prefix_len) == (2, 41, 0)
        pool.free_indices(kv.pop(2)[done.prefix_len:done.kv_len])
        assert_type(sched.finish(1), int)
        pool.free_indices(kv.pop(1))
        assert sched.stats().finished == 2 and pool.available_size() == 4096


def admission(lib: kvpool.Library) -> None:
    """One prefill pass's budget (Adder) and the DP ranks' verdict (Delayer)."""
    with kvpool.Adder(1000, running=[(10, 2, 5)], lib=lib, page_size=1) as adder:
        assert adder.config.new_token_ratio == 0.7
        admitted = adder.add_one_req(input_len=100, max_new_tokens=10)
        assert_type(admitted, kvpool.Admission)
        assert admitted.admitted and admitted.extend_len == 100
        assert admitted.next == kvpool.ADD_RESULT_CONTINUE
        refused = adder.add_one_req(2000, 10)
        assert not refused.admitted and refused.next == kvpool.ADD_RESULT_NO_TOKEN
        assert_type(adder.budget().rem_total_tokens, float)
    assert adder.closed
    with kvpool.Delayer(lib=lib, max_delay_passes=10) as delayer:
        rank = delayer.local_info(True, 0.5, running_bs=3, waiting_len=2)
        assert_type(rank, kvpool.RankInfo)
        verdict = delayer.negotiate([rank, rank])
        assert kvpool.DELAY_VERDICT_NAMES[verdict] == "NO_WAIT"


def main() -> None:
    lib = kvpool.load()  # $KVPOOL_LIB, or a build of this tree
    assert_type(lib, kvpool.Library)
    assert lib.abi_version() == kvpool.ABI_VERSION and lib.version() == kvpool.__version__
    host_pool(lib)
    prepared_decode(lib)
    request_table(lib)
    scheduler(lib)
    admission(lib)
    print("OK")


if __name__ == "__main__":
    main()
