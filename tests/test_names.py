"""Names as every view prints them (model/names.py): C++ kernel signatures from real GPU
traces shortened the way trace viewers do, short names left alone, the full name kept on
demand, and the kernel family findings without a cause are grouped by."""

from __future__ import annotations

from magneton.model.names import MAX_CHARS, family, full_names, short_name

# two of the kernels in ../shared/traces/hta/trace_diff_*.json.gz, verbatim
ADD = (
    "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, "
    "at::detail::Array<char*, 3> >(int, at::native::CUDAFunctor_add<float>, "
    "at::detail::Array<char*, 3>)"
)
COPY = (
    "void at::native::elementwise_kernel<128, 2, at::native::gpu_kernel_impl<at::native::"
    "(anonymous namespace)::direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#2}::"
    "operator()() const::{lambda()#14}::operator()() const::{lambda(float)#1}>(at::"
    "TensorIteratorBase&, at::native::(anonymous namespace)::direct_copy_kernel_cuda(at::"
    "TensorIteratorBase&)::{lambda()#2}::operator()() const::{lambda()#14}::operator()() "
    "const::{lambda(float)#1} const&)::{lambda(int)#1}>(int, at::native::gpu_kernel_impl<"
    "at::native::(anonymous namespace)::direct_copy_kernel_cuda(at::TensorIteratorBase&)::"
    "{lambda()#2}::operator()() const::{lambda()#14}::operator()() const::{lambda(float)#1}"
    ">(at::TensorIteratorBase&, at::native::(anonymous namespace)::direct_copy_kernel_cuda"
    "(at::TensorIteratorBase&)::{lambda()#2}::operator()() const::{lambda()#14}::operator()"
    "() const::{lambda(float)#1} const&)::{lambda(int)#1})"
)
CAT = (
    "void at::native::(anonymous namespace)::CatArrayBatchedCopy<float, unsigned int, 2, 128, "
    "1>(float*, at::native::(anonymous namespace)::CatArrInputTensorMetadata<float, unsigned "
    "int, 128, 1>, at::native::(anonymous namespace)::TensorSizeStride<unsigned int, 4u>, int, "
    "unsigned int)"
)


def test_kernel_signatures_fold_templates_arguments_and_namespaces():
    assert short_name(ADD) == "vectorized_elementwise_kernel<4, CUDAFunctor_add<…>, Array<…>>(…)"
    assert short_name(COPY) == "elementwise_kernel<128, 2, gpu_kernel_impl<…>>(…)"
    assert short_name(CAT) == "CatArrayBatchedCopy<float, unsigned int, 2, 128, 1>(…)"
    assert all(len(short_name(n)) <= MAX_CHARS for n in (ADD, COPY, CAT))


def test_short_names_and_single_namespaces_are_left_alone():
    for name in ("aten::addmm", "Memcpy DtoD (Device -> Device)", "c10d::allreduce_"):
        assert short_name(name) == name


def test_full_names_on_demand():
    with full_names():
        assert short_name(COPY) == COPY
    assert short_name(COPY) != COPY


def test_family_is_the_bare_name():
    assert family(ADD) == "vectorized_elementwise_kernel"
    assert family(COPY) == "elementwise_kernel"
    assert family(CAT) == "CatArrayBatchedCopy"
    assert family("Memcpy DtoD (Device -> Device)") == "Memcpy DtoD"
    assert family("ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)") == (
        "ncclKernel_AllReduce_RING_LL_Sum_float"
    )
