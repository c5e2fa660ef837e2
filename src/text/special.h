/* The ds4 special token strings. Ids are never hard-coded: the tokenizer resolves them by string
 * from the vocabulary. `｜` is U+FF5C (ef bd 9c) and `▁` is U+2581 (e2 96 81). The table order is
 * also the order in which rendered text is matched at each position (spec §5.3). */
#ifndef DSV4_TEXT_SPECIAL_H
#define DSV4_TEXT_SPECIAL_H

typedef enum dsv4_special {
    DSV4_SPECIAL_BOS = 0,
    DSV4_SPECIAL_EOS,
    DSV4_SPECIAL_USER,
    DSV4_SPECIAL_ASSISTANT,
    DSV4_SPECIAL_THINK_START,
    DSV4_SPECIAL_THINK_END,
    DSV4_SPECIAL_DSML,
    DSV4_SPECIAL_COUNT
} dsv4_special;

#define DSV4_BOS_STR                                                                                         \
    "<\xef\xbd\x9c"                                                                                          \
    "begin\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>"
#define DSV4_EOS_STR                                                                                         \
    "<\xef\xbd\x9c"                                                                                          \
    "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>"
#define DSV4_USER_STR "<\xef\xbd\x9cUser\xef\xbd\x9c>"
#define DSV4_ASSISTANT_STR                                                                                   \
    "<\xef\xbd\x9c"                                                                                          \
    "Assistant\xef\xbd\x9c>"
#define DSV4_THINK_START_STR "<think>"
#define DSV4_THINK_END_STR "</think>"
#define DSV4_DSML_STR                                                                                        \
    "\xef\xbd\x9c"                                                                                           \
    "DSML\xef\xbd\x9c"

/* Indexed by dsv4_special. */
static const char *const DSV4_SPECIAL_TOKENS[DSV4_SPECIAL_COUNT] = {
    DSV4_BOS_STR,         DSV4_EOS_STR,       DSV4_USER_STR, DSV4_ASSISTANT_STR,
    DSV4_THINK_START_STR, DSV4_THINK_END_STR, DSV4_DSML_STR,
};

#endif
