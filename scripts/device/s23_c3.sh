#!/usr/bin/env bash
# Session 23 call 3: s23_c2.sh again after the IQ2_XXS sign masks became one multiply and one mask a word
# (mp_sign_masks), ncu of the warpgroup kernel only.
SUMMARY=s23_c3 NCU_KINDS=ws exec bash "$(dirname "$0")/s23_c2.sh"
