#!/usr/bin/env bash
# Session 22 call 3: s22_c2.sh again after the producers stage each superblock of their rows in shared
# memory with coalesced loads (call 2: the per-thread row loads held mp_kernel at L1 wavefronts 77 %,
# 5.41 ms gate/up against mh_kernel 3.79 under ncu; flash 2K 3,734 against 4,615).
SUMMARY=s22_c3 exec bash "$(dirname "$0")/s22_c2.sh"
