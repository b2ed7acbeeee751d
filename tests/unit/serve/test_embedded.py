"""The embedded default server (speclab.serve.embedded): the dtype it picks for this CPU."""

from __future__ import annotations


def test_auto_dtype_takes_bf16_only_where_the_cpu_has_it_natively() -> None:
    from speclab.serve.embedded import cpu_has_native_bf16

    amd_avx2 = "processor\t: 0\nflags\t\t: fpu sse sse2 avx avx2 fma f16c\n"
    intel_avx512 = "processor\t: 0\nflags\t\t: fpu sse avx avx2 avx512f avx512dq avx512_bf16 amx_bf16\n"
    assert not cpu_has_native_bf16(amd_avx2)
    assert cpu_has_native_bf16(intel_avx512)
    assert not cpu_has_native_bf16("flags\t\t: avx512fp16_not_a_flag avx2\n")
