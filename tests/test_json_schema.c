/*
 * test_json_schema.c - src/text/json_schema.c: schemas converted to GBNF
 * and the grammars run by text/grammar.h's matcher.
 *
 *   - a table of schemas, one or more per supported feature, each with JSON
 *     texts that must match and texts that must not (wrong type, missing
 *     required key, extra key under additionalProperties false, too long,
 *     out of range by one, bad dates, trailing / doubled commas, trailing
 *     whitespace, ...);
 *   - integer ranges (bounded, one-sided, negative, exclusive) against
 *     arithmetic on every integer in a window around their bounds;
 *   - patterns against PCRE2 on every string over a small alphabet (that
 *     includes '"' and '\', so JSON escaping is checked too) up to length 4;
 *   - errors name the JSON pointer of the offending subschema and leave
 *     the output alone; the warn callback gets each dropped keyword with
 *     its pointer, and nothing for annotations;
 *   - rule names are valid and unique; $ref cycles without progress and
 *     deep nesting are errors, not hangs; counts past the grammar's repeat
 *     limit are loosened with a warning;
 *   - object keys are canonical: an extra key spelled with escapes JSON
 *     does not need (\u0070, \/) is refused, so it cannot repeat a listed
 *     key; listed keys of any length are kept out of the extra pairs;
 *   - many alternatives (an enum of 20000 strings, 6000 optional
 *     properties) stay within the matcher's limit on live alternatives;
 *   - $ref pointer segments that decode to a NUL or invalid UTF-8 are errors.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "text/grammar.h"
#include "text/json_schema.h"

/* Tables spell JSON with ' for " (unescaped); the copy turns them back. */
static char *dq(const char *s) {
    char *t = strdup(s);
    assert_non_null(t);
    for (char *p = t; *p; p++)
        if (*p == '\'') *p = '"';
    return t;
}

struct warns {
    char log[2048]; /* "keyword@pointer;" per call */
};

static void on_warn(void *ctx, const char *keyword, const char *where) {
    struct warns *w = ctx;
    const size_t n = strlen(w->log);
    snprintf(w->log + n, sizeof w->log - n, "%s@%s;", keyword, where);
}

/* The grammar of schema text s (' for "), parsed; fails the test on error. */
static struct ms_grammar *grammar_of(const char *s, struct warns *w, struct ms_buf *text) {
    char *js = dq(s);
    json_error_t je;
    json_t *schema = json_loads(js, JSON_DECODE_ANY, &je);
    if (!schema) fail_msg("bad test schema %s: %s", js, je.text);
    struct ms_buf b = {0};
    ms_err err;
    if (ms_json_schema_grammar(schema, &b, on_warn, w, &err)) fail_msg("%s\nschema: %s", err.msg, js);
    struct ms_grammar *g = NULL;
    if (ms_grammar_parse(&g, b.p, b.len, &err)) fail_msg("grammar refused: %s\nschema: %s\n%s", err.msg, js, b.p);
    json_decref(schema);
    free(js);
    if (text)
        *text = b;
    else
        ms_buf_free(&b);
    return g;
}

static int matches(const struct ms_grammar *g, const char *text, size_t n) {
    ms_err err;
    const int rc = ms_grammar_match(g, text, n, &err);
    if (rc < 0) fail_msg("matcher: %s (text %s)", err.msg, text);
    return rc;
}

struct mcase {
    const char *schema;
    const char *good[12];
    const char *bad[14];
};

static const struct mcase CASES[] = {
    /* 0. keywords beside enum / const keep the values they allow; escapes
     * a JSON parser refuses (\u0000, lone surrogates) and numbers past a
     * double are refused */
    {"{'type':'string','enum':['a','bb',3,null],'maxLength':1}", {"'a'"}, {"'bb'", "3", "null"}},
    {"{'enum':[1,2,30],'maximum':5}", {"1", "2"}, {"30"}},
    {"{'type':'integer','enum':[1,'2',2.5]}", {"1"}, {"'2'", "2.5"}},
    {"{'type':'string'}", {"'\\ud83d\\ude00'", "'\\u0001'"}, {"'\\u0000'", "'\\ud800'", "'\\udc00'", "'\\ud800x'"}},
    {"{'type':'number'}", {"1e99", "-1.5E-10"}, {"1e999", "1e100"}},
    /* 1. types, enum, const, boolean schemas */
    {"{'type':'string'}",
     {"'x'", "''", " 'a b'", "'\\n\\u00e9\\\\\\''", "'\xC3\xA9'"},
     {"1", "'x' ", "'a", "'\\x'", "'\\u12'", "'\x01'", "null"}},
    {"{'type':'integer'}",
     {"0", "-7", "1234567890123456", "-0"},
     {"01", "1.0", "1e3", "'1'", "12345678901234567", "+1", "1 "}},
    {"{'type':'number'}",
     {"0", "-1.5", "3e10", "2.5E-3", "1e+2", "0.0000000000000001"},
     {"1.", ".5", "--1", "1e", "NaN", "0.00000000000000001", "1e1234"}},
    {"{'type':'boolean'}", {"true", "false"}, {"True", "1", "null"}},
    {"{'type':'null'}", {"null", "\n null"}, {"nul", "null null", "0"}},
    {"{'type':['string','null']}", {"'a'", "null"}, {"1", "[]"}},
    {"{'enum':['red','green',3,null,[1,{'a':2}]]}",
     {"'red'", "'green'", "3", "null", "[1,{'a':2}]"},
     {"'blue'", "3.0", "[1, {'a':2}]", "'Red'"}},
    {"{'const':{'a':[1,2.5,'\xC3\xA9'],'b':0.1}}",
     {"{'a':[1,2.5,'\xC3\xA9'],'b':0.1}"},
     {"{'a': [1,2.5,'\xC3\xA9'],'b':0.1}", "{'b':0.1,'a':[1,2.5,'\xC3\xA9']}"}},
    {"true", {"1", "{'a':[null,true,{}]}", "'x'", " [ 1 , 2 ]"}, {"[1,]", "{'a'}", "[1] ", "{1:2}", ""}},
    {"{}", {"[]", "{}", "-1.5e3"}, {"tru", "{'a':1,}"}},
    {"{'type':'object'}", {"{}", "{'a':1,'b':{'c':[]}}", "{ 'a' : 1 }"}, {"[]", "{'a':1,}", "{,}", "{'a':1 'b':2}"}},
    /* 2. objects */
    {"{'type':'object','properties':{'name':{'type':'string'},'age':{'type':'integer'}},"
     "'required':['name','age'],'additionalProperties':false}",
     {"{'name':'a','age':1}", "{ 'name' : 'a' , 'age' : 1 }", "{\n  'name': 'a',\n  'age': 1\n}"},
     {"{'name':'a'}", "{'age':1}", "{'name':'a','age':1,'x':1}", "{'name':'a','age':1,}", "{'name':'a',,'age':1}",
      "{'name':'a','age':'1'}", "{'name':'a','age':1} ", "{}"}},
    {"{'properties':{'a':{'type':'integer'},'b':{'type':'integer'},'c':{'type':'integer'}},'additionalProperties':"
     "false}",
     {"{}", "{'a':1}", "{'b':1}", "{'c':1}", "{'a':1,'b':2}", "{'a':1,'c':3}", "{'b':2,'c':3}", "{'a':1,'b':2,'c':3}"},
     {"{,}", "{'a':1,}", "{,'a':1}", "{'a':1,,'b':2}", "{'b':2,'a':1}", "{'d':1}", "{'a':1'b':2}"}},
    {"{'properties':{'a':{'type':'integer'},'b':{'type':'integer'},'c':{'type':'integer'}},'required':['b'],"
     "'additionalProperties':false}",
     {"{'b':1}", "{'a':1,'b':2}", "{'b':2,'c':3}", "{'a':1,'b':2,'c':3}"},
     {"{}", "{'a':1}", "{'c':1}", "{'a':1,'c':1}"}},
    {"{'type':'object','properties':{'a':{'type':'integer'}},'required':['a']}",
     {"{'a':1}", "{'a':1,'x':'y','z':[{}]}"},
     {"{'x':1}", "{'a':1,}", "{'a':1,'x'}"}},
    /* extra keys are any but the listed ones, so a listed key cannot come back with another value */
    {"{'properties':{'ab':{'type':'integer'},'a':{'type':'integer'},'\xC3\xA9':{'type':'null'}}}",
     {"{'ab':1,'a':2}", "{'x':'y'}", "{'':1,'abc':2,'b':3,'aa':4,'\xC3\xA9\xC3\xA9':5}"},
     {"{'a':1,'ab':2}" /* valid JSON Schema-wise, but keys come in the schema's order */, "{'a':'x'}", "{'ab':'x'}",
      "{'ab':1,'ab':2}", "{'a':1,'a':1}", "{'\xC3\xA9':1}", "{'x':1,'a':1}"}},
    {"{'type':'object','properties':{'a':{'type':'integer'}},'additionalProperties':{'type':'string'}}",
     {"{}", "{'a':1}", "{'a':1,'x':'y'}", "{'x':'y','z':''}"},
     {"{'a':1,'x':1}", "{'x':null}"}},
    {"{'type':'object','additionalProperties':false}", {"{}", "{ }"}, {"{'a':1}"}},
    {"{'properties':{'a':false,'b':{'type':'integer'}},'additionalProperties':false}", {"{}", "{'b':1}"}, {"{'a':1}"}},
    {"{'type':'object','required':['id'],'additionalProperties':{'type':'integer'}}",
     {"{'id':1}", "{'id':1,'n':2}"},
     {"{}", "{'id':'x'}"}},
    {"{'properties':{'a b':{'const':1},'a\\'q':{'const':2},'\xC3\xA9t\xC3\xA9':{'const':3},'a/b~':{'const':4}},"
     "'required':['a b','a\\'q','\xC3\xA9t\xC3\xA9','a/b~'],'additionalProperties':false}",
     {"{'a b':1,'a\\'q':2,'\xC3\xA9t\xC3\xA9':3,'a/b~':4}"},
     {"{'a b':1,'a\\'q':2,'ete':3,'a/b~':4}"}},
    /* keys are canonical (escapes only where JSON requires them), so an extra key never spells a listed one */
    {"{'type':'object','properties':{'p5':{'type':'integer'}},'required':['p5']}",
     {"{'p5':1}", "{'p5':1,'q':'s'}", "{'p5':1,'p\\n':'s','p\\\\':1,'p\\u001f':2}"},
     {"{'p5':1,'\\u0070\\u0035':'s'}", "{'p5':1,'p\\u0035':1}", "{'\\u0070\\u0035':1}", "{'p5':1,'p5':2}",
      "{'p5':1,'p\\u000a':1}", "{'p5':1,'p\\u001F':1}", "{'p5':1,'p\\/':1}"}},
    {"{'type':'object','properties':{'a/b':{'type':'integer'}},'additionalProperties':{'type':'string'}}",
     {"{'a/b':1}", "{'a/b':1,'a\\\\b':'s'}", "{'a/b':1,'x\\ny':'s'}", "{'ab':'s'}", "{'a/bc':'s','a/':'s'}"},
     {"{'a/b':1,'a\\/b':'s'}", "{'a\\/b':'s'}", "{'a/b':1,'a\\u002fb':'s'}", "{'a/b':1,'x\\u000ay':'s'}",
      "{'a/b':'s'}"}},
    {"{'properties':{'q\\'t':{'type':'integer'},'n\\nl':{'type':'integer'},'c\\u001f':{'type':'integer'},"
     "'\\\\':{'type':'integer'}},'required':['q\\'t','n\\nl'],'additionalProperties':{'type':'string'}}",
     {"{'q\\'t':1,'n\\nl':2}", "{'q\\'t':1,'n\\nl':2,'c\\u001f':3,'\\\\':4}",
      "{'q\\'t':1,'n\\nl':2,'q':'x','n\\tl':'y','c\\u001e':'z','\\\\\\\\':'w'}"},
     {"{'q\\u0022t':1,'n\\nl':2}", "{'q\\'t':1,'n\\u000al':2}", "{'q\\'t':1,'n\\nl':2,'c\\u001F':'x'}",
      "{'q\\'t':1,'n\\nl':2,'n\\nl':'x'}", "{'q\\'t':1,'n\\nl':2,'q\\u0027t':'x'}",
      "{'q\\'t':1,'n\\nl':2,'\\u005c':'x'}", "{'q\\'t':1,'n\\nl':2,'c\\u001f':'x'}"}},
    {"{'enum':['a\\u001bb',{'k\\n':'\\/'}]}", {"'a\\u001bb'", "{'k\\n':'/'}"}, {"'a\\u001Bb'", "{'k\\n':'\\/'}"}},
    /* 3. arrays */
    {"{'type':'array','items':{'type':'integer'}}",
     {"[]", "[1]", "[1,2,3]", "[ 1 , 2 ]", "[\n1\n]"},
     {"[1,]", "[,1]", "[1,,2]", "['a']", "[1] ", "[", "[1 2]"}},
    {"{'type':'array','items':{'type':'boolean'},'minItems':2,'maxItems':3}",
     {"[true,false]", "[true,false,true]"},
     {"[]", "[true]", "[true,true,true,true]"}},
    {"{'type':'array','prefixItems':[{'type':'integer'},{'type':'string'}],'items':false}",
     {"[]", "[1]", "[1,'a']"},
     {"['a']", "[1,'a',2]", "[1,2]"}},
    {"{'type':'array','prefixItems':[{'type':'integer'},{'type':'string'}],'items':{'type':'null'},'minItems':2}",
     {"[1,'a']", "[1,'a',null,null]"},
     {"[1]", "[1,'a',1]", "[]"}},
    {"{'type':'array','items':[{'const':'x'}],'additionalItems':{'type':'integer'},'maxItems':2}",
     {"[]", "['x']", "['x',5]"},
     {"['x',5,6]", "[5]"}},
    {"{'type':'array','maxItems':0}", {"[]", "[ ]"}, {"[1]"}},
    /* 4. strings */
    {"{'type':'string','minLength':2,'maxLength':3}",
     {"'ab'", "'abc'", "'\\n\\t'", "'\\u00e9ab'", "'\xC3\xA9\xC3\xA9'"},
     {"''", "'a'", "'abcd'", "'\\n'", "'\\u00e9'"}},
    {"{'type':'string','maxLength':0}", {"''"}, {"'a'"}},
    {"{'type':'string','format':'date'}",
     {"'2024-02-29'", "'1999-12-31'"},
     {"'2024-13-01'", "'2024-00-10'", "'2024-01-32'", "'24-01-01'", "'2024-1-01'", "'2024-01-01 '"}},
    {"{'type':'string','format':'time'}",
     {"'23:59:60Z'", "'00:00:00.5+01:00'", "'12:30:00-05:00'"},
     {"'24:00:00Z'", "'12:60:00Z'", "'12:00:00'", "'12:00Z'"}},
    {"{'type':'string','format':'date-time'}",
     {"'2024-01-31T12:00:00Z'", "'2024-01-31t23:59:59.999+05:30'"},
     {"'2024-01-31 12:00:00Z'", "'2024-01-31T12:00:00'", "'2024-01-31'"}},
    {"{'type':'string','format':'uuid'}",
     {"'123e4567-e89b-12d3-a456-426614174000'", "'ABCDEF01-2345-6789-abcd-ef0123456789'"},
     {"'123e4567e89b12d3a456426614174000'", "'123e4567-e89b-12d3-a456-42661417400'",
      "'g23e4567-e89b-12d3-a456-426614174000'"}},
    {"{'type':'string','pattern':'^[a-z]+(-[a-z0-9]+)*$'}",
     {"'abc'", "'ab-c1-d'"},
     {"''", "'Abc'", "'abc-'", "'a--b'"}},
    {"{'type':'string','pattern':'\\\\d{3}'}", {"'123'", "'ab1234'", "'x\\'123'"}, {"'12'", "'1a2b3'"}},
    {"{'type':'string','pattern':'^(?:\\\\w+\\\\.)?[A-Z]{2,3}?$'}",
     {"'AB'", "'x_1.ABC'"},
     {"'A'", "'x.ABCD'", "'.AB'"}},
    {"{'type':'string','pattern':'^a|b$'}", {"'a'", "'axx'", "'xxb'", "'b'"}, {"'xa'", "'bx'"}},
    /* 5. combinators, $ref, nullable */
    {"{'anyOf':[{'type':'integer'},{'type':'string','maxLength':1},false]}", {"1", "'a'"}, {"'ab'", "null"}},
    {"{'oneOf':[{'const':1},{'const':2}]}", {"1", "2"}, {"3"}},
    {"{'type':'object','properties':{'k':{'type':'string'}},'anyOf':[{'required':['k']},{'properties':{'n':{'type':'"
     "null'}},'required':['n']}]}",
     {"{'k':'v'}", "{'k':'v','n':null}", "{'n':null}"},
     {"{}", "{'k':1}"}},
    {"{'allOf':[{'type':'object','properties':{'a':{'type':'integer'}},'required':['a']},"
     "{'properties':{'b':{'type':'string'}},'required':['b']}],'additionalProperties':false}",
     {"{'a':1,'b':'x'}"},
     {"{'a':1}", "{'b':'x'}", "{'a':1,'b':'x','c':1}"}},
    {"{'$defs':{'pos':{'type':'integer','minimum':1}},'type':'array','items':{'$ref':'#/$defs/pos'}}",
     {"[]", "[1,2]"},
     {"[0]", "[-1]"}},
    {"{'definitions':{'a/b':{'type':'string'},'t~':{'type':'integer'}},'properties':{'x':{'$ref':'#/definitions/a~1b'},"
     "'y':{'$ref':'#/definitions/t~0'}},'required':['x','y'],'additionalProperties':false}",
     {"{'x':'s','y':1}"},
     {"{'x':1,'y':1}"}},
    {"{'$defs':{'node':{'type':'object','properties':{'v':{'type':'integer'},'kids':{'type':'array','items':{'$ref':'#/"
     "$defs/node'}}},"
     "'required':['v'],'additionalProperties':false}},'$ref':'#/$defs/node'}",
     {"{'v':1}", "{'v':1,'kids':[]}", "{'v':1,'kids':[{'v':2,'kids':[{'v':3}]}]}"},
     {"{'v':1,'kids':[{}]}", "{'kids':[]}"}},
    {"{'type':'array','items':{'$ref':'#'}}", {"[]", "[[],[[]]]"}, {"[1]", "[[1]]"}},
    {"{'type':'string','nullable':true}", {"'a'", "null"}, {"1"}},
    {"{'$ref':'#/$defs/a','nullable':true,'$defs':{'a':{'type':'boolean'}}}", {"true", "null"}, {"1"}},
    /* 6. integer bounds */
    {"{'type':'integer','minimum':0,'maximum':150}", {"0", "150", "99"}, {"-1", "151", "-0", "1000", "00"}},
    {"{'type':'integer','exclusiveMinimum':-3,'exclusiveMaximum':3}", {"-2", "2", "0"}, {"-3", "3"}},
    {"{'type':'integer','minimum':5,'exclusiveMinimum':true}", {"6", "600"}, {"5"}},
    {"{'type':'integer','minimum':1.5,'maximum':9.5}", {"2", "9"}, {"1", "10"}},
};

static void run_cases(const struct mcase *cases, size_t n) {
    for (size_t i = 0; i < n; i++) {
        struct warns w = {{0}};
        struct ms_buf text;
        struct ms_grammar *g = grammar_of(cases[i].schema, &w, &text);
        for (size_t k = 0; k < 14; k++) {
            const char *t = k < 12 ? cases[i].good[k] : NULL;
            if (!t) continue;
            char *j = dq(t);
            if (matches(g, j, strlen(j)) != 1)
                fail_msg("case %zu: '%s' should match schema %s\n%s", i, j, cases[i].schema, text.p);
            free(j);
        }
        for (size_t k = 0; k < 14 && cases[i].bad[k]; k++) {
            char *j = dq(cases[i].bad[k]);
            if (matches(g, j, strlen(j)) != 0)
                fail_msg("case %zu: '%s' should not match schema %s\n%s", i, j, cases[i].schema, text.p);
            free(j);
        }
        ms_grammar_free(g);
        ms_buf_free(&text);
    }
}

static void test_cases(void **state) {
    (void)state;
    run_cases(CASES, sizeof CASES / sizeof CASES[0]);
}

/* Every integer in [-1100, 1100] and around each bound, against arithmetic. */
static void test_integer_ranges(void **state) {
    (void)state;
    static const struct {
        const char *kw;
        long long lo, hi; /* the range the keywords mean; +-1e18: open */
    } R[] = {
        {"'minimum':0,'maximum':0", 0, 0},
        {"'minimum':-1,'maximum':1", -1, 1},
        {"'minimum':-1", -1, (long long)1e18},
        {"'minimum':-5,'maximum':5", -5, 5},
        {"'minimum':7,'maximum':1000", 7, 1000},
        {"'minimum':-1000,'maximum':-7", -1000, -7},
        {"'minimum':-99,'maximum':100", -99, 100},
        {"'minimum':10", 10, (long long)1e18},
        {"'maximum':-10", -(long long)1e18, -10},
        {"'maximum':123", -(long long)1e18, 123},
        {"'minimum':-123", -123, (long long)1e18},
        {"'exclusiveMinimum':99,'exclusiveMaximum':1001", 100, 1000},
        {"'minimum':19,'maximum':91", 19, 91},
        {"'minimum':1234567,'maximum':1234600", 1234567, 1234600},
        {"'minimum':-1e30,'maximum':1e30", -(long long)1e18, (long long)1e18},
    };
    for (size_t i = 0; i < sizeof R / sizeof R[0]; i++) {
        char s[200];
        snprintf(s, sizeof s, "{'type':'integer',%s}", R[i].kw);
        struct ms_buf text;
        struct ms_grammar *g = grammar_of(s, NULL, &text);
        long long probes[2300];
        size_t np = 0;
        for (long long v = -1100; v <= 1100; v++) probes[np++] = v;
        const long long edges[] = {R[i].lo, R[i].hi};
        for (size_t k = 0; k < 2; k++)
            if (edges[k] > -(long long)1e18 && edges[k] < (long long)1e18)
                for (long long d = -2; d <= 2; d++) probes[np++] = edges[k] + d;
        probes[np++] = 9999999999999999LL, probes[np++] = -9999999999999999LL;
        for (size_t k = 0; k < np; k++) {
            char t[32];
            snprintf(t, sizeof t, "%lld", probes[k]);
            const int want = probes[k] >= R[i].lo && probes[k] <= R[i].hi;
            if (matches(g, t, strlen(t)) != want)
                fail_msg("%s: %s should %s\n%s", s, t, want ? "match" : "not match", text.p);
        }
        if (R[i].lo > -(long long)1e18 || R[i].hi < (long long)1e18) /* a bounded range never has -0 */
            assert_int_equal(matches(g, "-0", 2), 0);
        assert_int_equal(matches(g, "007", 3), 0);
        ms_grammar_free(g);
        ms_buf_free(&text);
    }
}

/* Patterns as JSON Schema means them (unanchored search, PCRE2 with the
 * pattern as written) against the grammar on the JSON text of every string
 * over an alphabet with the characters JSON escapes. */
static void test_patterns_vs_pcre2(void **state) {
    (void)state;
    static const char *const pats[] = {
        "ab",
        "^ab",
        "ab$",
        "^ab$",
        "^a*b+$",
        "^(a|b\"){1,2}$",
        "^[^a]$",
        "^[a-c]?\\\\$",
        "^.$",
        "a|^b",
        "^\\w\\W$",
        "^[\\s\"]*$",
        "^(?:ab|)$",
        "^(a(b)?)*$",
        "^a{2,}$",
        "^\\d|c$",
        "^\\n?[\\\\x]$",
        "b{0}a",
        "^[^\"\\\\]+$",
        "^.*a.*$",
        "^(ab?)+$",
        "a{2}",
        "^\\\\[\"n]$",
        "^[ -\\\\]$",
        "^(a|b?){2}c$",
        "^(a*){1,2}$",
        "^[\\d\\s]+\\S?$",
        "^(?<g>a)|\\x62$",
        "^(a|)+$",
        "^(a*b?)*c$",
        "^(a?|b)*(c?)+$",
    };
    static const char alpha[] = {'a', 'b', 'c', '"', '\\', '\n', '1', ' '};
    const size_t na = sizeof alpha;
    for (size_t p = 0; p < sizeof pats / sizeof pats[0]; p++) {
        int code;
        PCRE2_SIZE off;
        pcre2_code *re = pcre2_compile((PCRE2_SPTR)pats[p], PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_DOLLAR_ENDONLY,
                                       &code, &off, NULL);
        assert_non_null(re);
        pcre2_match_data *md = pcre2_match_data_create_from_pattern(re, NULL);
        json_t *schema = json_pack("{s:s,s:s}", "type", "string", "pattern", pats[p]);
        struct ms_buf text = {0};
        ms_err err;
        struct ms_grammar *g = NULL;
        if (ms_json_schema_grammar(schema, &text, NULL, NULL, &err) || ms_grammar_parse(&g, text.p, text.len, &err))
            fail_msg("pattern %s: %s", pats[p], err.msg);
        size_t total = 1;
        for (int len = 0; len <= 4; len++, total *= na)
            for (size_t idx = 0; idx < total; idx++) {
                char s[8];
                size_t x = idx;
                for (int k = 0; k < len; k++, x /= na) s[k] = alpha[x % na];
                s[len] = 0;
                const int want = pcre2_match(re, (PCRE2_SPTR)s, (size_t)len, 0, 0, md, NULL) >= 0;
                json_t *js = json_stringn(s, (size_t)len);
                char *enc = json_dumps(js, JSON_ENCODE_ANY);
                if (matches(g, enc, strlen(enc)) != want)
                    fail_msg("pattern %s on %s: grammar %d, PCRE2 %d\n%s", pats[p], enc, !want, want, text.p);
                free(enc);
                json_decref(js);
            }
        ms_grammar_free(g);
        ms_buf_free(&text);
        json_decref(schema);
        pcre2_match_data_free(md);
        pcre2_code_free(re);
    }
}

static void expect_error(const char *s, const char *needle) {
    char *js = dq(s);
    json_t *schema = json_loads(js, JSON_DECODE_ANY, NULL);
    if (!schema) fail_msg("bad test schema %s", js);
    struct ms_buf out = {0};
    ms_buf_puts(&out, "keep");
    ms_err err = {{0}};
    if (ms_json_schema_grammar(schema, &out, NULL, NULL, &err) == 0) fail_msg("no error for %s:\n%s", js, out.p);
    if (!strstr(err.msg, needle)) fail_msg("error '%s' lacks '%s' (schema %s)", err.msg, needle, js);
    assert_string_equal(out.p, "keep"); /* out unchanged */
    ms_buf_free(&out);
    json_decref(schema);
    free(js);
}

static void test_errors(void **state) {
    (void)state;
    expect_error("false", "(root): schema allows nothing");
    expect_error("[1]", "(root): a schema must be an object or a boolean");
    expect_error("{'properties':{'age':{'type':'integer','minimum':'0'}}}",
                 "/properties/age: 'minimum' must be a number");
    expect_error("{'properties':{'a':{'type':'strin'}}}", "/properties/a: unknown type 'strin'");
    expect_error("{'properties':{'a':false},'required':['a']}", "/properties/a: schema allows nothing");
    expect_error("{'properties':{'a':{'type':'string','maxLength':-1}}}",
                 "/properties/a: 'maxLength' must be a non-negative");
    expect_error("{'type':'string','minLength':3,'maxLength':2}", "(root): schema allows nothing");
    expect_error("{'properties':[]}", "'properties' must be an object");
    expect_error("{'required':[1]}", "'required' must be an array of strings");
    expect_error("{'type':'object','required':['x'],'additionalProperties':false}", "required 'x'");
    expect_error("{'type':5}", "'type' must be a string");
    expect_error("{'enum':[]}", "'enum' must be a non-empty array");
    expect_error("{'anyOf':{}}", "'anyOf' must be a non-empty array");
    expect_error("{'anyOf':[false,false]}", "every 'anyOf' branch is false");
    expect_error("{'items':{'$ref':'#/$defs/missing'}}", "/items: $ref '#/$defs/missing' not found");
    expect_error("{'$ref':'other.json#/a'}", "not a local JSON pointer");
    expect_error("{'$ref':7}", "'$ref' must be a string");
    expect_error("{'$ref':'#'}", "refers back to itself");
    /* a pointer segment must decode to a key a schema can hold: no NUL (it
     * would cut the key short: '' here), no invalid UTF-8 */
    expect_error("{'$defs':{'':{'type':'integer'}},'$ref':'#/$defs/%00'}", "(root): $ref '#/$defs/%00' has a segment");
    expect_error("{'$defs':{'a':{}},'items':{'$ref':'#/$defs/a%00b'}}", "/items: $ref '#/$defs/a%00b' has a segment");
    expect_error("{'$defs':{'':{}},'$ref':'#/$defs/%FF'}", "$ref '#/$defs/%FF' has a segment that decodes to a NUL or "
                                                           "to invalid UTF-8");
    expect_error("{'anyOf':[{'type':'null'},{'$ref':'#'}]}", "/anyOf/1: $ref '#' refers back");
    expect_error("{'$defs':{'a':{'$ref':'#/$defs/b'},'b':{'$ref':'#/$defs/a'}},'$ref':'#/$defs/a'}", "refers back");
    expect_error("{'allOf':[{'$ref':'#'}]}", "refers back");
    expect_error("{'type':'integer','minimum':5,'maximum':4}", "schema allows nothing");
    expect_error("{'type':'integer','exclusiveMinimum':4,'exclusiveMaximum':5}", "schema allows nothing");
    expect_error("{'type':'array','prefixItems':[{}],'items':false,'minItems':2}", "schema allows nothing");
    expect_error("{'type':'string','pattern':'(ab'}", "'pattern' is not a valid regex: missing ')'");
    expect_error("{'type':'string','pattern':'a{3,2}'}", "'pattern' is not a valid regex");
    expect_error("{'type':'string','pattern':'[b-a]'}", "'pattern' is not a valid regex");
    expect_error("{'nullable':1}", "'nullable' must be a boolean");
    expect_error("{'type':'integer','minimum':1e30}", "'minimum'");
    /* 70 nested arrays: past the depth limit, an error and no stack overflow */
    char deep[1024] = "";
    for (int i = 0; i < 70; i++) strcat(deep, "{'items':");
    strcat(deep, "{}");
    for (int i = 0; i < 70; i++) strcat(deep, "}");
    expect_error(deep, "nested deeper than 64");
    /* 20 definitions, each an anyOf of the next one twice, beside a type:
     * merged inline, 2^20 branches; the expansion budget stops it */
    char wide[4096] = "{'$ref':'#/$defs/d0','$defs':{";
    for (int i = 0; i < 20; i++)
        snprintf(wide + strlen(wide), sizeof wide - strlen(wide),
                 "'d%d':{'type':'object','anyOf':[{'$ref':'#/$defs/d%d'},{'$ref':'#/$defs/d%d'}]},", i, i + 1, i + 1);
    strcat(wide, "'d20':{'type':'object'}}}");
    expect_error(wide, "schema too large");
}

static void expect_warns(const char *s, const char *want) {
    struct warns w = {{0}};
    struct ms_grammar *g = grammar_of(s, &w, NULL);
    ms_grammar_free(g);
    if (strcmp(w.log, want)) fail_msg("schema %s warned '%s', want '%s'", s, w.log, want);
}

static void test_warnings(void **state) {
    (void)state;
    expect_warns("{'title':'t','description':'d','$schema':'x','$id':'y','default':1,'examples':[],'$comment':'c',"
                 "'deprecated':false,'readOnly':true,'writeOnly':false,'strict':true,'type':'string'}",
                 "");
    expect_warns("{'type':'object','properties':{'a':{'type':'array','uniqueItems':true,'contains':{}}},"
                 "'minProperties':1,'patternProperties':{},'not':{}}",
                 "minProperties@;patternProperties@;not@;uniqueItems@/properties/a;contains@/properties/a;");
    expect_warns("{'type':'number','minimum':0,'exclusiveMaximum':1,'multipleOf':0.5}",
                 "multipleOf@;minimum@;exclusiveMaximum@;");
    expect_warns("{'type':'string','format':'email'}", "format@;");
    expect_warns("{'$defs':{'a':{'type':'string','format':'email'}},'items':{'$ref':'#/$defs/a'}}", "format@/$defs/a;");
    expect_warns("{'properties':{'x':{'type':'string','pattern':'(?=a)b'}}}", "pattern@/properties/x;");
    expect_warns("{'type':'string','pattern':'(a)\\\\1'}", "pattern@;");
    expect_warns("{'type':'string','pattern':'\\\\bx'}", "pattern@;");
    expect_warns("{'type':'string','pattern':'a^b'}", "pattern@;");
    expect_warns("{'type':'string','format':'uuid','maxLength':36}", "maxLength@;");
    expect_warns("{'oneOf':[{'type':'integer'},{'type':'number'}]}", "oneOf@;");
    expect_warns("{'allOf':[{'type':'integer'},{'type':'string'}]}", "allOf@;");
    expect_warns("{'$defs':{'a':{'type':'integer'}},'properties':{'p':{'$ref':'#/$defs/a','minimum':3}}}",
                 "minimum@/properties/p;");
    expect_warns("{'if':{},'then':{},'else':{},'propertyNames':{},'dependentRequired':{},'maxProperties':3}",
                 "if@;then@;else@;propertyNames@;dependentRequired@;maxProperties@;");
}

/* Counts past MS_GRAMMAR_MAX_REPEAT: unbounded maxima, lowered minima. */
static void test_repeat_limit(void **state) {
    (void)state;
    struct warns w = {{0}};
    struct ms_grammar *g = grammar_of("{'type':'string','maxLength':20000}", &w, NULL);
    assert_string_equal(w.log, "maxLength@;");
    char *long_str = malloc(12003);
    assert_non_null(long_str);
    long_str[0] = '"';
    memset(long_str + 1, 'x', 12000);
    long_str[12001] = '"', long_str[12002] = 0;
    assert_int_equal(matches(g, long_str, 12002), 1);
    free(long_str);
    ms_grammar_free(g);
    memset(&w, 0, sizeof w);
    g = grammar_of("{'type':'array','minItems':20000,'maxItems':30000}", &w, NULL);
    assert_string_equal(w.log, "maxItems@;minItems@;");
    ms_grammar_free(g);
}

/* Rule names: valid, unique, readable; the start rule first. */
static void test_rule_names(void **state) {
    (void)state;
    struct ms_buf text;
    struct ms_grammar *g = grammar_of("{'properties':{'a b':{'type':'string','maxLength':2},'a-b':{'type':'string',"
                                      "'maxLength':3},'string':{'enum':[1,2]},'':{'const':0},'x\xC3\xA9':{'const':1}}}",
                                      NULL, &text);
    assert_non_null(strstr(text.p, "root ::= ws "));
    assert_ptr_equal(strstr(text.p, "root ::= "), text.p);
    char seen[64][64];
    int n = 0;
    for (const char *line = text.p; *line; line = strchr(line, '\n') + 1) {
        const size_t len = strcspn(line, " ");
        assert_true(len > 0 && len < 64);
        assert_int_equal(strspn(line, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-"), len);
        for (int k = 0; k < n; k++)
            if (strlen(seen[k]) == len && !memcmp(seen[k], line, len)) fail_msg("rule defined twice:\n%s", text.p);
        assert_true(n < 64);
        memcpy(seen[n], line, len), seen[n++][len] = 0;
    }
    assert_non_null(strstr(text.p, "a-b ::= ")); /* readable: from the property name */
    assert_non_null(strstr(text.p, "a-b-2 ::= "));
    static const char doc[] = "{\"a b\":\"xy\",\"a-b\":\"xyz\",\"string\":2,\"\":0,\"x\xC3\xA9\":1}";
    assert_int_equal(matches(g, doc, sizeof doc - 1), 1);
    ms_grammar_free(g);
    ms_buf_free(&text);
}

/* The grammar of a schema built in code (taken), parsed; fails the test on error. */
static struct ms_grammar *grammar_of_json(json_t *schema, struct ms_buf *text) {
    ms_err err;
    struct ms_grammar *g = NULL;
    *text = (struct ms_buf){0};
    if (ms_json_schema_grammar(schema, text, NULL, NULL, &err)) fail_msg("%s", err.msg);
    if (ms_grammar_parse(&g, text->p, text->len, &err)) fail_msg("grammar refused: %s", err.msg);
    json_decref(schema);
    return g;
}

static void expect_match(const struct ms_grammar *g, const char *text, int want) {
    char *j = dq(text);
    if (matches(g, j, strlen(j)) != want) fail_msg("'%s' should %s", j, want ? "match" : "not match");
    free(j);
}

/* An enum of 20000 strings: as a list of alternatives, each starting with
 * '"', the matcher would track 20000 at once (past MS_GRAMMAR_MAX_STACKS);
 * as a trie, as many as it branches. */
static void test_large_enum(void **state) {
    (void)state;
    static const char *const words[] = {"alpha", "beta", "gamma", "delta",  "eps", "zeta", "eta",
                                        "theta", "iota", "kappa", "lambda", "mu",  "nu"};
    json_t *vals = json_array();
    char s[64];
    for (int i = 0; i < 20000; i++) {
        snprintf(s, sizeof s, "%s/%d%c", words[i % 13], i, "abcde"[i * 7 % 5]);
        assert_int_equal(json_array_append_new(vals, json_string(s)), 0);
    }
    struct ms_buf text;
    struct ms_grammar *g = grammar_of_json(json_pack("{s:o}", "enum", vals), &text);
    for (int i = 0; i < 20000; i += 37) {
        snprintf(s, sizeof s, "\"%s/%d%c\"", words[i % 13], i, "abcde"[i * 7 % 5]);
        if (matches(g, s, strlen(s)) != 1) fail_msg("%s should match", s);
        snprintf(s, sizeof s, "\"%s/%d%c\"", words[(i + 1) % 13], i, "abcde"[i * 7 % 5]);
        assert_int_equal(matches(g, s, strlen(s)), 0);
        snprintf(s, sizeof s, "\"%s/%d%c\"", words[i % 13], i, "abcde"[(i * 7 + 1) % 5]);
        assert_int_equal(matches(g, s, strlen(s)), 0);
        snprintf(s, sizeof s, "\"%s/%d\"", words[i % 13], i);
        assert_int_equal(matches(g, s, strlen(s)), 0);
        snprintf(s, sizeof s, "\"%s/%d%ca\"", words[i % 13], i, "abcde"[i * 7 % 5]);
        assert_int_equal(matches(g, s, strlen(s)), 0);
        snprintf(s, sizeof s, "\"%s/%d%c\"", words[i % 13], i + 20000, "abcde"[i * 7 % 5]);
        assert_int_equal(matches(g, s, strlen(s)), 0);
    }
    assert_int_equal(matches(g, "\"alpha/\"", 9), 0);
    ms_grammar_free(g);
    ms_buf_free(&text);
}

/* 6000 optional properties: after "{" or a pair any later key may come,
 * which as a list would be 6000 alternatives at its '"'. */
static void test_many_properties(void **state) {
    (void)state;
    json_t *props = json_object();
    char k[16];
    for (int i = 0; i < 6000; i++) {
        snprintf(k, sizeof k, "p%d", i);
        assert_int_equal(json_object_set_new(props, k, json_pack("{s:s}", "type", "integer")), 0);
    }
    struct ms_buf text;
    struct ms_grammar *g = grammar_of_json(json_pack("{s:s,s:O}", "type", "object", "properties", props), &text);
    static const char *const good[] = {"{'p3':1,'p250':2,'p4999':3,'p5999':4}",
                                       "{}",
                                       "{'p0':0}",
                                       "{'p3':1,'p25':2,'p250':3,'p2500':4}",
                                       "{'p5999':1,'x':[]}",
                                       "{ 'p1' : 1 , 'p10' : 2 , 'p100' : 3 , 'p1000' : 4 , 'p60000' : 5 }"},
                             *const bad[] = {"{'p250':1,'p3':2}",    "{'p3':1,'p3':2}",       "{'p3':1,'x':2,'p4':3}",
                                             "{'p3':'s'}",           "{'p3':1,'p\\u0033':2}", "{'p3':1,}",
                                             "{'p5999':1,'p5998':1}"};
    for (size_t i = 0; i < sizeof good / sizeof *good; i++) expect_match(g, good[i], 1);
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) expect_match(g, bad[i], 0);
    ms_grammar_free(g);
    ms_buf_free(&text);
    /* the same with three required among them and no extra keys */
    g = grammar_of_json(json_pack("{s:o,s:[sss],s:b}", "properties", props, "required", "p1000", "p3000", "p5999",
                                  "additionalProperties", 0),
                        &text);
    static const char *const good2[] = {"{'p1000':1,'p3000':2,'p5999':3}",
                                        "{'p0':0,'p1000':1,'p2000':1,'p3000':2,'p4000':1,'p5998':1,'p5999':3}"},
                             *const bad2[] = {"{'p1000':1,'p5999':3}", "{'p1000':1,'p3000':2,'p5999':3,'x':1}",
                                              "{'p1000':1,'p3000':2,'p6000':1,'p5999':3}",
                                              "{'p2000':1,'p1000':1,'p3000':2,'p5999':3}", "{}"};
    for (size_t i = 0; i < sizeof good2 / sizeof *good2; i++) expect_match(g, good2[i], 1);
    for (size_t i = 0; i < sizeof bad2 / sizeof *bad2; i++) expect_match(g, bad2[i], 0);
    ms_grammar_free(g);
    ms_buf_free(&text);
}

/* Listed keys of any length are kept out of the extra pairs. */
static void test_long_key(void **state) {
    (void)state;
    char key[302], doc[1024];
    memset(key, 'k', 300), key[300] = '!', key[301] = 0;
    struct ms_buf text;
    struct ms_grammar *g = grammar_of_json(json_pack("{s:{s:{s:s}},s:{s:s}}", "properties", key, "type", "integer",
                                                     "additionalProperties", "type", "string"),
                                           &text);
    snprintf(doc, sizeof doc, "{\"%s\":1,\"%s\":\"x\"}", key, key);
    assert_int_equal(matches(g, doc, strlen(doc)), 0);
    snprintf(doc, sizeof doc, "{\"%s\":\"x\"}", key);
    assert_int_equal(matches(g, doc, strlen(doc)), 0);
    snprintf(doc, sizeof doc, "{\"%s\":1,\"%.300s\":\"x\",\"%s?\":\"y\"}", key, key, key);
    assert_int_equal(matches(g, doc, strlen(doc)), 1);
    ms_grammar_free(g);
    ms_buf_free(&text);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cases),
        cmocka_unit_test(test_integer_ranges),
        cmocka_unit_test(test_patterns_vs_pcre2),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_warnings),
        cmocka_unit_test(test_repeat_limit),
        cmocka_unit_test(test_rule_names),
        cmocka_unit_test(test_large_enum),
        cmocka_unit_test(test_many_properties),
        cmocka_unit_test(test_long_key),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
