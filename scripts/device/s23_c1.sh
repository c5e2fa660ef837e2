#!/usr/bin/env bash
# Session 23 call 1 (ran at commit 5134884, where the kernel had the 4-chunk, 64-k-stage form): cuda_ops_check on
# flash4 with DSV4_CUDA_MOE_WS=1, =2 and without; the full flash q2 2K prefill interleaved (=1, down, gateup, mh);
# a per-op profile (DSV4_CUDA_PROFILE=1) of the default 2K prefill; ncu of both kernels. The steps are
# s23_c2.sh's with WS2, PROF and no oracle step.
SUMMARY=s23_c1 WS2=1 PROF=1 ORACLE=0 exec bash "$(dirname "$0")/s23_c2.sh"
