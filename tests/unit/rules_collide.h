/*
 * Two compact layouts whose rules hashed alike before the hash took each
 * string with its length: a place's "by" ran on into the next rule's
 * pattern, so "layers" + "x*" and "layersx" + "*" read the same. The first
 * gives source rank 1 (pp 1) nothing and tensor "y" to no one, the second
 * both. test_rules checks the hashes differ; test_badinput that ranks
 * holding one each are refused at set-up.
 */
#ifndef FX_TESTS_RULES_COLLIDE_H
#define FX_TESTS_RULES_COLLIDE_H

#define COLLIDE(by, next)                                                  \
    "{\"tensors\": [{\"name\": \"a.layers.0.layersx.1.w\", \"dtype\": "   \
    "\"f32\", \"shape\": [4]}, {\"name\": \"y\", \"dtype\": \"f32\", "    \
    "\"shape\": [4]}], \"layout\": {\"sources\": {\"grid\": [[\"pp\", 2]], " \
    "\"rules\": [{\"tensors\": \"a*\", \"place\": [{\"over\": \"pp\", "    \
    "\"by\": \"" by "\", \"of\": 2}]}, {\"tensors\": \"" next "\"}]}, "       \
    "\"targets\": {\"first\": 2, \"grid\": [[\"dp\", 2]], \"rules\": "      \
    "[{\"tensors\": \"a*\"}]}}}"
#define COLLIDE_A COLLIDE("layers", "x*")
#define COLLIDE_B COLLIDE("layersx", "*")

#endif
