/*
 * json_schema.h - JSON Schema to GBNF: the grammar (text/grammar.h notation)
 * of the JSON texts a schema accepts, for constrained decoding of OpenAI
 * response_format json_schema / json_object, Anthropic output_config.format
 * and the CLI's --json-schema.
 *
 * The start rule is "root". Output is JSON as a model would write it:
 *
 *   - Whitespace: "ws" (at most 20 of space, tab, newline) before the value
 *     and after every token inside objects and arrays ("{", "[", ",", ":",
 *     each key and value); none after the top value, so the text ends where
 *     the value ends.
 *   - Object keys come in the order of "properties" (required ones always,
 *     optional ones each present or not), then keys listed in "required"
 *     but not in "properties", then, unless additionalProperties is false,
 *     any number of further pairs whose keys are none of those (values per
 *     the additionalProperties schema). So a listed key cannot come back
 *     later with another value, but keys out of the schema's order are
 *     refused although JSON Schema allows them.
 *   - Keys of objects whose schema names keys (listed and extra keys
 *     alike) are canonical, as JSON.stringify writes them: each character
 *     raw except the escapes JSON requires, \" and \\, \b \f \n \r \t for
 *     those controls, and \u00xx (lower-case hex) for the other controls
 *     U+0000-U+001F; no \/ and no \uXXXX for a character that needs no
 *     escape. A key has one spelling then, so an extra key never decodes
 *     to a listed one.
 *     (Keys of objects whose schema names none, and string values, take
 *     any escape.)
 *   - Numbers: JSON syntax with at most 16 integer digits, 16 fraction
 *     digits and 2 exponent digits, so digits cannot run on forever and
 *     every number fits a double (parsers refuse 1e999).
 *   - String escapes \uXXXX: never \u0000 (C consumers and jansson refuse
 *     it) and no lone surrogate (a high one comes with its low one).
 *   - const / enum values: their exact compact serialization (no spaces,
 *     object keys in the schema's order, reals in their shortest form,
 *     strings in the canonical form of keys).
 *   - Strings with a pattern or format are written in plain form: each
 *     character raw unless JSON requires an escape (", \, U+0000-U+001F).
 *   - Alternatives that begin alike, enum / const values and the keys that
 *     may come next in an object, share their beginnings (a trie), since
 *     the matcher tracks each alternative the next character may start
 *     (at most MS_GRAMMAR_MAX_STACKS): as many are live as the values
 *     branch at that point (keys: that times about 2 log2 of the number of
 *     properties), however many values there are. Values that branch more
 *     than that many ways at one character (5000 one-character CJK values
 *     that each go on differently) are still too ambiguous for it.
 *
 * Supported: true / false / {} schemas, type (one or a list; inferred from
 * the keywords when absent), enum, const, properties (a false property:
 * the key may not appear), required, additionalProperties, items,
 * prefixItems, items as an array with additionalItems (drafts 4-7),
 * minItems, maxItems, minLength, maxLength (characters; an escape is one),
 * format date, time, date-time, uuid (RFC 3339 / RFC 4122), pattern (an
 * ECMA-262 subset: literals, escapes, classes, ".", groups, "|", greedy or
 * lazy quantifiers, "^" / "$" at the ends; an unanchored end admits any
 * characters), anyOf, oneOf (as anyOf), allOf (merged: properties and
 * required joined, a property in two members must match both, other
 * keywords from the first member that has them), keywords beside anyOf /
 * oneOf / allOf (they apply to each branch / are merged), $ref to local
 * JSON pointers ("#", "#/$defs/NAME", "#/definitions/NAME", ..., with ~0
 * ~1 and %XX escapes; each referenced schema becomes one rule, recursion
 * allowed), nullable (OpenAPI), integer minimum / maximum /
 * exclusiveMinimum / exclusiveMaximum (draft 4 boolean and draft 6 number
 * forms; exact decimal ranges; a bound past 18 digits is no bound).
 *
 * Dropped with a warning (the grammar is looser than the schema there):
 * constraining keywords it does not know (not, if/then/else,
 * patternProperties, propertyNames, uniqueItems, multipleOf,
 * minProperties, contains, dependentRequired, ...), other formats, bounds
 * on "number", patterns using lookaround, backreferences, \b, \p or
 * anchors inside, lengths beside a pattern or format (and a format beside
 * a pattern), oneOf's exclusivity, conflicting allOf members (the first
 * wins), keywords beside $ref, counts past MS_GRAMMAR_MAX_REPEAT
 * (maxLength / maxItems become unbounded, minLength / minItems that
 * limit). Annotations (title, description, $schema, $id, default,
 * examples, $comment, deprecated, readOnly, writeOnly, strict, ...) are
 * ignored silently, and so are vendor extensions ("x-..." keywords).
 */
#ifndef MS_TEXT_JSON_SCHEMA_H
#define MS_TEXT_JSON_SCHEMA_H

#include <jansson.h>
#include <stdint.h>

#include "util/buf.h"
#include "util/err.h"

/* Called once per schema keyword the grammar cannot enforce (it is dropped,
 * so the grammar is looser than the schema there): the keyword's name and
 * the JSON pointer of the subschema holding it ("" is the root). Both
 * strings are valid during the call only. */
typedef void (*ms_json_schema_warn_fn)(void *ctx, const char *keyword, const char *where);

/*
 * Appends to out the GBNF grammar of the JSON texts valid under schema
 * (borrowed, not changed; the grammar text is the caller's, in out).
 * warn may be NULL. Returns 0, or -1 with err naming the JSON pointer of
 * the offending subschema ("(root)" for the root) and out unchanged.
 * Errors: a schema that is neither an object nor a boolean, a keyword of
 * the wrong type ("/properties/age: 'minimum' must be a number"), an
 * unknown type name, a schema that allows nothing (false outside anyOf, an
 * empty integer range, minItems > maxItems, a required key that is false
 * or that additionalProperties false forbids), a $ref that is not a local
 * JSON pointer, not found, or with a segment that decodes (%XX) to a NUL
 * or to invalid UTF-8, a $ref cycle that never reaches a value
 * ({"$ref": "#"}), nesting deeper than 64 schemas, more than 50000
 * subschemas to expand (allOf / anyOf merging can multiply them), a pattern
 * that is not a regex, OOM.
 */
int ms_json_schema_grammar(const json_t *schema, struct ms_buf *out, ms_json_schema_warn_fn warn, void *warn_ctx,
                           ms_err *err);

/*
 * Appends to out a GBNF expression matching exactly the strings the whole
 * of regex re[0..n) matches, as raw text (not JSON): the ECMA-262 subset
 * of "pattern" above, read as Python's re reads it where the two differ
 * in that subset: "." is anything but "\n", "{,n}" is "{0,n}", "\U" takes
 * 8 hex digits, a "]" first in a class is itself; "\A", "\Z", "\z",
 * "\G" and "\N{...}" are refused; \w \d \s are ASCII, and their negations
 * (\W, [^\w...]) keep within ASCII too, so that the text matches Python's
 * Unicode classes either way. "^" and "$" at the ends change nothing. A
 * NUL is refused. excl (0: none) is left out of every class and ".", and
 * a literal excl is an error: for text that must never hold it. Counts
 * past MS_GRAMMAR_MAX_REPEAT are loosened to unbounded. 0, or -1 with err
 * (a syntax error, a construct a grammar cannot express, OOM).
 */
int ms_regex_gbnf(const char *re, size_t n, uint32_t excl, struct ms_buf *out, ms_err *err);

/* The subschema a local $ref ("#", "#/$defs/NAME", any JSON pointer with
 * ~0 ~1 and %XX escapes) names inside root (borrowed), or NULL with *why
 * (a phrase: "not found", "is not a local JSON pointer ...", ...). */
const json_t *ms_json_schema_ref(const json_t *root, const char *ref, const char **why);

/* ---- several schemas in one grammar ----
 *
 * For grammars that hold JSON values in several places (the arguments of
 * each tool in a tool-call block, text/dsml_grammar.h): each added schema
 * becomes one named rule, and the rules they need (shared ones such as
 * "string" and "ws" once) come out together. Generated rule names use
 * [A-Za-z0-9-] only, so a caller that names its own rules with an "_" in
 * them never meets one. */
struct ms_json_schema_set;

/* A new, empty set (*out, the caller's: ms_json_schema_set_free). warn as
 * for ms_json_schema_grammar, for every schema added. Errors: OOM. */
int ms_json_schema_set_new(struct ms_json_schema_set **out, ms_json_schema_warn_fn warn, void *warn_ctx,
                           ms_err *err);

/* Adds the rule `name` ::= ws, then the JSON text of a value valid under
 * schema, which sits at JSON pointer ptr inside root (local $refs resolve
 * against root; ptr prefixes error and warning locations). hint, when not
 * empty, starts the names of the rules generated for it. All borrowed.
 * Errors: those of ms_json_schema_grammar, and a name that is not a rule
 * name ([A-Za-z0-9_-]) or is taken; on error the set is as it was before
 * the call (warnings already given stay given). */
int ms_json_schema_set_add(struct ms_json_schema_set *set, const json_t *root, const json_t *schema, const char *ptr,
                           const char *name, const char *hint, ms_err *err);

/* From now on, strings (values and keys, not patterns) never hold the
 * character cp as itself: only as its escape \uXXXX (keys, whose
 * canonical form has no such escape, cannot hold it at all). For JSON that
 * sits inside markup that cp would start. 0 lifts it. */
void ms_json_schema_set_no_raw(struct ms_json_schema_set *set, uint32_t cp);

/* Appends every rule of the set to out: the added ones first, in order,
 * then those they use. The set stays usable. Errors: OOM (out unchanged). */
int ms_json_schema_set_finish(struct ms_json_schema_set *set, struct ms_buf *out, ms_err *err);

void ms_json_schema_set_free(struct ms_json_schema_set *set);

#endif
