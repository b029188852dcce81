/*
 * dsml_grammar.h - the grammar (text/grammar.h notation) of a DSML
 * tool-call block whose calls follow the tools' JSON schemas, so that a
 * call the model writes under it always parses (text/dsml.h) into
 * arguments the tool accepts.
 *
 * The block is spelled as the chat template renders calls
 * (chat_template.c): the opening tag, one or more invokes, the closing
 * tag, with up to 4 whitespace characters between tags (the template
 * writes one newline; the parser takes any whitespace there). Tags are
 * the template's exact spelling:
 *
 *   <｜DSML｜tool_calls>
 *   <｜DSML｜invoke name="NAME">
 *   <｜DSML｜parameter name="KEY" string="true">raw text</｜DSML｜parameter>
 *   <｜DSML｜parameter name="KEY" string="false">JSON</｜DSML｜parameter>
 *   </｜DSML｜invoke>
 *   </｜DSML｜tool_calls>
 *
 * Per tool (its "parameters" schema, an object schema):
 *
 *   - NAME is one of the tools' names. A tool whose name is empty, holds a
 *     quote or the start of a tag ("<｜", "</｜") cannot be read back by the
 *     parser and is left out (reported).
 *   - Parameters come in the order of "properties" (of the schema, or of
 *     where a local $ref at its top leads): the required ones always, the
 *     others each present or not; keys listed in "required" but not in
 *     "properties" follow, with any value. Keys not listed are refused,
 *     whatever additionalProperties says (a call that invents arguments is
 *     the error this exists to prevent); "properties": {} takes none. A
 *     property whose schema is false never appears. Keywords beside the
 *     properties (minProperties, not, ...) are reported, not enforced.
 *   - A value is JSON valid under the property's schema (text/json_schema.h,
 *     string="false"), or, where the schema admits strings, raw text
 *     (string="true"), which the parser takes as the string itself: any
 *     text for a plain string, with minLength / maxLength when given; one
 *     of the values for enum / const (those the type and lengths beside
 *     them keep); each branch's for anyOf / oneOf, through local $refs.
 *     Where the schema admits strings only through a pattern, a format, or
 *     keywords beside an anyOf that raw text could not be checked against,
 *     the value is JSON only (the converter enforces those).
 *   - A tool whose parameters schema names no properties ({},
 *     {"type": "object"}: an open object) takes any parameters with any
 *     values; so does one whose schema is not an object's properties
 *     (anyOf, a type other than object) or that the converter refuses (a
 *     bad $ref, a property that allows nothing yet is required), reported.
 *     No "parameters" at all, or additionalProperties false with no
 *     properties: the tool takes none (OpenAI's reading).
 *
 * What cannot reach the parser: raw text never holds "<｜" or "</｜"
 * (either could start a tag that ends the value or the call early), and
 * JSON strings never hold "｜" itself, only its escape \uff5c (the same
 * reason; a key holding "｜" cannot be written). Bounded raw text holds no
 * "｜" at all.
 */
#ifndef MS_TEXT_DSML_GRAMMAR_H
#define MS_TEXT_DSML_GRAMMAR_H

#include <jansson.h>
#include <stdbool.h>

#include "util/buf.h"
#include "util/err.h"

/* The start rule of the block's grammar. */
#define MS_DSML_GRAMMAR_ROOT "dsml_tool_calls"

/* Called for each thing the grammar does not enforce: the tool's name and
 * a sentence ("'pattern' at /properties/q is not enforced"); both valid
 * during the call only. */
typedef void (*ms_dsml_grammar_warn_fn)(void *ctx, const char *tool, const char *what);

/*
 * Appends to out the GBNF of a tool-call block calling the tools, start
 * rule MS_DSML_GRAMMAR_ROOT. tools: an array of {"type": "function",
 * "function": {"name", "parameters"?}} (OpenAI chat's shape, as the chat
 * template takes them; borrowed). formats: NULL, or an object from tool
 * name to a custom tool's grammar, {"syntax": "lark" | "regex",
 * "definition": TEXT} (OpenAI's custom tool format): that tool's "input"
 * parameter is then raw text in that grammar (text/lark.h,
 * ms_regex_gbnf), or, where the grammar cannot be read, any text
 * (warned). one_call: the block holds one call (OpenAI's
 * parallel_tool_calls false), then closes. warn may be NULL. Returns 0,
 * or -1 with err and out unchanged: no tool can be called by name, OOM.
 */
int ms_dsml_tools_grammar(const json_t *tools, const json_t *formats, bool one_call, struct ms_buf *out,
                          ms_dsml_grammar_warn_fn warn, void *warn_ctx, ms_err *err);

#endif
