"""The pure decoders under seeded mutation fuzzing (``tests.fuzzing``): HTTP/2 frames
into a server connection, Angelia frames and HELLO, every Angelia codec, the remoting
stream decoder and body parsers. Each keeps its contract (see ``tests.fuzzing``) on
every input; ``RIP5_FUZZ_EXAMPLES`` sets the inputs per target (``make fuzz`` runs
many; ``python -m tests.fuzzing --inputs N`` runs millions and prints the counts).
"""

from __future__ import annotations

import os

import pytest

from tests import fuzzing

FUZZ_INPUTS = int(os.environ.get("RIP5_FUZZ_EXAMPLES", "10000"))


@pytest.mark.parametrize("target", sorted(fuzzing.targets()))
def test_every_input_keeps_the_decoders_contract(target: str) -> None:
    done = fuzzing.run(target, FUZZ_INPUTS, seed=1)
    assert done.inputs == FUZZ_INPUTS


def test_mutations_cover_flips_cuts_and_duplicated_slices() -> None:
    rng = fuzzing.random.Random(3)
    seed = bytes(range(64))
    mutated = [fuzzing.mutate(seed, rng) for _ in range(400)]
    assert any(len(m) == len(seed) and bin(int.from_bytes(m) ^ int.from_bytes(seed)).count("1") == 1
               for m in mutated)  # fmt: skip
    assert any(len(m) < len(seed) and seed.startswith(m) for m in mutated)  # truncated
    assert any(len(m) > len(seed) for m in mutated)  # inserted or duplicated
    assert len(set(mutated)) > 300


def test_a_broken_contract_names_the_target_and_the_input() -> None:
    def crashes(data: bytes) -> None:
        raise KeyError("boom")

    with pytest.raises(fuzzing.FuzzFinding, match=r"crashy seed 1 input 0 raised KeyError"):
        fuzzing.run_target("crashy", crashes, [b"seed"], 10, seed=1)


def test_progress_is_reported_with_the_inputs_run_so_far() -> None:
    heard: list[int] = []
    done = fuzzing.run_target(
        "quiet", lambda data: None, [b"seed"], 25, seed=1,
        progress=lambda so_far: heard.append(so_far.inputs), progress_every=10,
    )  # fmt: skip
    assert heard == [10, 20]
    assert done.inputs == 25
