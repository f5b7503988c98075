/* pretok.c - pre-tokenizers: split text into the pieces that BPE runs on.
 *
 * A pre-tokenizer is data: a sequence of steps, each a regex (PCRE2, UTF + UCP,
 * so \p{L}, \p{N}, \s come from PCRE2's Unicode tables).  Like HF's
 * Split(..., Isolated) -- and llama.cpp's unicode_regex_split -- every match is a
 * piece and so is the text between matches; each step splits every piece of the
 * step before separately (so `\s+(?!\S)` sees the end of its piece, not the text
 * after it).  An empty match (superbpe's lookahead) is a split point.
 *
 * The table below follows llama.cpp's src/llama-vocab.cpp (llm_tokenizer_bpe's
 * regex_exprs per LLAMA_VOCAB_PRE_TYPE_*, and llama_vocab::impl::load's table of
 * tokenizer.ggml.pre names; read at ggml-org/llama.cpp 00ad355e) and
 * src/unicode.cpp.  Where llama.cpp rewrote a tokenizer.json regex only because
 * std::regex cannot run it ((?i:...) spelled as [sS] classes; \p{Lu}/\p{Ll} as
 * lookaheads over [^a-z] / [^A-Z]; possessive quantifiers made greedy), the
 * tokenizer.json regex is used as written: PCRE2 runs it, the splits are the HF
 * tokenizer's, and for the (?i:) and possessive rewrites they are llama.cpp's as
 * well.  (The \p{Lu}/\p{Ll} rewrite is exact on ASCII; on non-ASCII letters
 * llama.cpp's own split drifts from HF's, and so would ours if we copied it.)
 * Where unicode.cpp runs custom code instead of the regex text, we do what the
 * code does:
 *   - the GPT-2 regex as llama.cpp lists it has no final `|\s+`; its fast path
 *     has it (and so does tokenizer.json): used with it;
 *   - kimi-k2's `\p{Han}+` triggers a hand-written split: Han (llama.cpp's
 *     ranges, not the Unicode script) runs, then letter runs that exclude Han with
 *     no upper/lower distinction and no \p{M}, then the Llama 3 tail: k_re_kimi
 *     is that code as a regex;
 *   - afmoe's `\p{AFMoE_digits}` is not a regex: each digit run splits into its
 *     first len % 3 digits and then groups of three, and the text before a run
 *     stays in one piece with the run's first group (STEP_AFMOE_DIGITS).
 * tests/python/test_pretok.py compares every pre-tokenizer's pieces with HF
 * tokenizers on a generated corpus, and names the HF structure of each.
 *
 * Callers pass only valid UTF-8 (tokenizer.c validates first), so matching uses
 * PCRE2_NO_UTF_CHECK and the subject is checked once, not once per match. */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tok_internal.h"

/* ---- the regexes (llama.cpp's llama-vocab.cpp / the models' tokenizer.json) ---- */

#define CONTRACTIONS_I "(?i:'s|'t|'re|'ve|'m|'ll|'d)"
static const char k_re_gpt2[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
static const char k_re_llama3[] =
    CONTRACTIONS_I "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}|"
    " ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char k_re_jais2[] =
    CONTRACTIONS_I "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|"
    "\\s{512}(?!\\S)|\\s{256}(?!\\S)|\\s{128}(?!\\S)|\\s{64}(?!\\S)|\\s{32}(?!\\S)|\\s{16}(?!\\S)|"
    "\\s{8}(?!\\S)|\\s{4}(?!\\S)|\\s{1,2}(?!\\S)|\\s{1}";
static const char k_re_qwen2[] =
    CONTRACTIONS_I "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}|"
    " ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char k_re_qwen35[] =
    CONTRACTIONS_I "|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
/* deepseek-llm's letters: the cased letters (L&) of some Unicode version, as
 * tokenizer.json lists them; written as code points because several are
 * singletons (U+1F7D, U+1FBE, U+1FD3, U+1FDB, U+2126, U+212A) that Unicode
 * normalization would silently turn into other characters */
static const char k_re_dsllm_letters[] =
    "\\s?[A-Za-z\\x{B5}\\x{C0}-\\x{D6}\\x{D8}-\\x{F6}\\x{F8}-\\x{1BA}\\x{1BC}-\\x{1BF}\\x{1C4}-\\x{293}"
    "\\x{295}-\\x{2AF}\\x{370}-\\x{373}\\x{376}\\x{377}\\x{37B}-\\x{37D}\\x{37F}\\x{386}\\x{388}-\\x{38A}"
    "\\x{38C}\\x{38E}-\\x{3A1}\\x{3A3}-\\x{3F5}\\x{3F7}-\\x{481}\\x{48A}-\\x{52F}\\x{531}-\\x{556}"
    "\\x{10A0}-\\x{10C5}\\x{13A0}-\\x{13F5}\\x{13F8}-\\x{13FD}\\x{1C90}-\\x{1CBA}\\x{1CBD}-\\x{1CBF}"
    "\\x{1D00}-\\x{1D2B}\\x{1D6B}-\\x{1D77}\\x{1D79}-\\x{1D9A}\\x{1E00}-\\x{1F15}\\x{1F18}-\\x{1F1D}"
    "\\x{1F20}-\\x{1F45}\\x{1F48}-\\x{1F4D}\\x{1F50}-\\x{1F57}\\x{1F59}\\x{1F5B}\\x{1F5D}\\x{1F5F}-\\x{1F7D}"
    "\\x{1F80}-\\x{1FB4}\\x{1FB6}-\\x{1FBC}\\x{1FBE}\\x{1FC2}-\\x{1FC4}\\x{1FC6}-\\x{1FCC}\\x{1FD0}-\\x{1FD3}"
    "\\x{1FD6}-\\x{1FDB}\\x{1FE0}-\\x{1FEC}\\x{1FF2}-\\x{1FF4}\\x{1FF6}-\\x{1FFC}\\x{2102}\\x{2107}"
    "\\x{210A}-\\x{2113}\\x{2115}\\x{2119}-\\x{211D}\\x{2124}\\x{2126}\\x{2128}\\x{212A}-\\x{212D}"
    "\\x{212F}-\\x{2134}\\x{2139}\\x{213C}-\\x{213F}\\x{2145}-\\x{2149}\\x{214E}\\x{2183}\\x{2184}"
    "\\x{2C00}-\\x{2C7B}\\x{2C7E}-\\x{2CE4}\\x{2CEB}-\\x{2CEE}\\x{2CF2}\\x{2CF3}\\x{A640}-\\x{A66D}"
    "\\x{A680}-\\x{A69B}\\x{A722}-\\x{A76F}\\x{A771}-\\x{A787}\\x{A78B}-\\x{A78E}\\x{AB70}-\\x{ABBF}"
    "\\x{FB00}-\\x{FB06}\\x{FB13}-\\x{FB17}\\x{FF21}-\\x{FF3A}\\x{FF41}-\\x{FF5A}\\x{10400}-\\x{1044F}"
    "\\x{104B0}-\\x{104D3}\\x{104D8}-\\x{104FB}\\x{10C80}-\\x{10CB2}\\x{10CC0}-\\x{10CF2}"
    "\\x{118A0}-\\x{118DF}\\x{1E900}-\\x{1E943}]+";
/* ! to /, : to ~, fullwidth ！ to ／ and ： to ～, ‘ to ‟, ideographic space to 。 */
static const char k_re_dsllm_punct[] =
    "\\s?[!-/:-~\\x{FF01}-\\x{FF0F}\\x{FF1A}-\\x{FF5E}\\x{2018}-\\x{201F}\\x{3000}-\\x{3002}]+";
/* 一-龥, U+0800-一, 가-U+D7FF (deepseek's CJK / Hangul class, as written) */
static const char k_re_ds_cjk[] = "[\\x{4E00}-\\x{9FA5}\\x{800}-\\x{4E00}\\x{AC00}-\\x{D7FF}]+";
/* 一-龥, hiragana, katakana */
static const char k_re_ds3_cjk[] = "[\\x{4E00}-\\x{9FA5}\\x{3040}-\\x{309F}\\x{30A0}-\\x{30FF}]+";
#define DS3_MAIN_HEAD                                                                                         \
    "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\\r\\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+|"
static const char k_re_ds3_main[] = DS3_MAIN_HEAD " ?[\\p{P}\\p{S}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char k_re_spark_main[] = DS3_MAIN_HEAD " ?[\\p{P}\\p{S}]+|[\\r\\n]|\\s+(?!\\S)|\\s+";
/* youtu: Hangul, CJK punctuation, bopomofo, CJK (as llama.cpp lists them) */
static const char k_re_youtu_cjk[] =
    "[\\x{AC00}-\\x{D7A3}\\x{3131}-\\x{318E}]+|"
    "[\\x{FF01}\\x{2026}\\x{201C}\\x{201D}\\x{2018}\\x{2019}\\x{2014}\\x{FF1A}\\x{FF1B}\\x{FF0C}"
    "\\x{3001}-\\x{303F}\\x{FE30}-\\x{FE4F}]+|[\\x{3105}-\\x{312F}]+|"
    "[\\x{4E00}-\\x{9FA5}\\x{3040}-\\x{309F}\\x{30A0}-\\x{30FF}]+";
#define UPPER "[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]"
#define LOWER "[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]"
#define PRE "[^\\r\\n\\p{L}\\p{N}]?"
static const char k_re_youtu[] =
    PRE UPPER "*" LOWER "+" CONTRACTIONS_I "?|" PRE UPPER "+" LOWER "*" CONTRACTIONS_I "?|"
    "\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char k_re_tekken[] =
    PRE UPPER "*" LOWER "+|" PRE UPPER "+" LOWER "*|"
    "\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char k_re_gpt4o[] =
    PRE UPPER "*" LOWER "+" CONTRACTIONS_I "?|" PRE UPPER "+" LOWER "*" CONTRACTIONS_I "?|"
    "\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
/* granite-embed-multi-97m: llama.cpp's own regex (GPT-4o's lookaheads with \p{M}
 * added; no tokenizer.json text is quoted), capture groups made non-capturing */
#define GR_UP "(?:(?=[\\p{L}\\p{M}])[^a-z])"
#define GR_LO "(?:(?=[\\p{L}\\p{M}])[^A-Z])"
static const char k_re_granite_multi[] =
    PRE GR_UP "*" GR_LO "+" CONTRACTIONS_I "?|" PRE GR_UP "+" GR_LO "*" CONTRACTIONS_I "?|"
    "\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
/* tiny_aya's `\d{1,3}(?=(?:\d{3})*\b)` with \b spelled out as HF's Oniguruma has it
 * (Unicode's word characters: Alphabetic, \p{M}, \p{Nd}, \p{Pc}, joiners); PCRE2's UCP
 * \b counts every \p{N} (e.g. U+2472) as a word character and not U+2163. */
#define AYA_W "[\\p{Alphabetic}\\p{M}\\p{Nd}\\p{Pc}\\x{200C}\\x{200D}]"
static const char k_re_aya_digits[] =
    "\\d{1,3}(?=(?:\\d{3})*(?:(?<=" AYA_W ")(?!" AYA_W ")|(?<!" AYA_W ")(?=" AYA_W ")))";
/* kimi-k2: unicode.cpp's unicode_regex_split_custom_kimi_k2 as a regex (see the top);
 * HAN is its unicode_cpt_is_han */
#define HAN                                                                                                   \
    "[\\x{4E00}-\\x{9FFF}\\x{3400}-\\x{4DBF}\\x{20000}-\\x{2A6DF}\\x{2A700}-\\x{2EBEF}\\x{F900}-\\x{FAFF}"  \
    "\\x{2F800}-\\x{2FA1F}]"
static const char k_re_kimi[] =
    HAN "+|" PRE "(?:(?!" HAN ")\\p{L})+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|"
    "\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
/* bloom / gpt3-finnish / poro / viking: …。，、।۔، */
static const char k_re_bloom[] =
    " ?[^(\\s|.,!?\\x{2026}\\x{3002}\\x{FF0C}\\x{3001}\\x{964}\\x{6D4}\\x{60C})]+";
static const char k_re_bailing[] =
    "'(?i:[sdmt]|ll|ve|re)|[^\\r\\n\\p{L}\\p{N}]?+\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]++[\\r\\n]*|"
    "\\s*[\\r\\n]|\\s+(?!\\S)|\\s+";
static const char k_re_seed_coder[] =
    CONTRACTIONS_I "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1}| ?[^\\s\\p{L}\\p{N}\\r\\n]+|\\s*[\\r\\n]+|"
    "\\s+(?!\\S)|\\s+";
static const char k_re_ufakzeka[] =
    "[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
/* afmoe: CJK, kana, halfwidth katakana, Kangxi radicals, Thai, Lao, Khmer, Myanmar
 * (and its extensions), Hangul syllables and jamo */
static const char k_re_afmoe_cjk[] =
    "[\\x{4E00}-\\x{9FFF}\\x{3400}-\\x{4DBF}\\x{F900}-\\x{FAFF}\\x{3040}-\\x{309F}\\x{30A0}-\\x{30FF}"
    "\\x{FF65}-\\x{FF9F}\\x{2F00}-\\x{2FDF}\\x{E00}-\\x{E7F}\\x{E80}-\\x{EFF}\\x{1780}-\\x{17FF}"
    "\\x{1000}-\\x{109F}\\x{AA60}-\\x{AA7F}\\x{A9E0}-\\x{A9FF}\\x{AC00}-\\x{D7AF}\\x{1100}-\\x{11FF}]+";
static const char k_re_exaone_moe[] =
    CONTRACTIONS_I "|[^\\r\\n\\p{L}\\p{N}]?(?:\\p{L}\\p{M}*(?: \\p{L}\\p{M}*)*)+|\\p{N}|"
    " ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]?|\\s*[\\r\\n]|\\s+(?!\\S)|\\s+";
static const char k_re_minicpm5[] =
    CONTRACTIONS_I "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}+| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|"
    "\\s+(?!\\S)|\\s+";

/* ---- the pre-tokenizers ---- */

enum { STEP_REGEX, STEP_AFMOE_DIGITS };

typedef struct {
    int kind;
    const char *re; /* STEP_REGEX: the pattern; STEP_AFMOE_DIGITS: the digit-run pattern */
} step;

typedef struct {
    const char *type; /* llama.cpp's LLAMA_VOCAB_PRE_TYPE_* */
    step steps[LS_PRETOK_MAX_STEPS];
} pretok_def;

#define RE(x) {STEP_REGEX, x}
static const pretok_def k_defs[] = {
    {"GPT2", {RE(k_re_gpt2)}},
    /* STARCODER, REFACT, COMMAND_R, SMOLLM, CODESHELL, EXAONE, MINERVA, MELLUM2 */
    {"STARCODER", {RE("\\p{N}"), RE(k_re_gpt2)}},
    /* LLAMA3, DBRX, SMAUG, CHATGLM4 (one regex; flags differ by name) */
    {"LLAMA3", {RE(k_re_llama3)}},
    /* QWEN2, STABLELM2, HUNYUAN, SOLAR_OPEN, GROK_2 (the same regex) */
    {"QWEN2", {RE(k_re_qwen2)}},
    {"QWEN35", {RE(k_re_qwen35)}},
    {"JAIS2", {RE(k_re_jais2)}},
    {"DEEPSEEK_LLM",
     {RE("[\\r\\n]"), RE(k_re_dsllm_letters), RE(k_re_dsllm_punct), RE("\\s+$"), RE(k_re_ds_cjk), RE("\\p{N}+")}},
    /* DEEPSEEK3_LLM, HUNYUAN_DENSE, JOYAI_LLM, HY_V4 */
    {"DEEPSEEK3_LLM", {RE("\\p{N}{1,3}"), RE(k_re_ds3_cjk), RE(k_re_ds3_main)}},
    {"SPARK2_5", {RE("\\p{N}{1,3}"), RE(k_re_ds3_cjk), RE(k_re_spark_main), RE("\\p{N}")}},
    {"YOUTU", {RE(k_re_youtu_cjk), RE(k_re_youtu)}},
    {"DEEPSEEK_CODER", {RE("[\\r\\n]"), RE("\\s?\\p{L}+"), RE("\\s?\\p{P}+"), RE(k_re_ds_cjk), RE("\\p{N}")}},
    {"FALCON", {RE("[\\p{P}\\$\\+<=>\\^~\\|]+"), RE(k_re_gpt2), RE("[0-9][0-9][0-9]")}},
    /* PORO, BLOOM, GPT3_FINNISH */
    {"BLOOM", {RE(k_re_bloom)}},
    {"VIKING", {RE(k_re_bloom), RE("\\p{N}")}},
    {"TEKKEN", {RE(k_re_tekken)}},
    {"CHAMELEON",
     {RE("<sentinel:[0-9]+>"), RE("(IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z"), RE("([\\t\\n]|    |  )"), RE("\\p{N}"),
      RE("[\\p{P}!-/:-@\\[-`{-~]"), RE(k_re_gpt2)}},
    /* GPT4O, MINIMAX_M2 */
    {"GPT4O", {RE(k_re_gpt4o)}},
    {"GRANITE_EMB_MULTI", {RE(k_re_granite_multi)}},
    {"TINY_AYA", {RE(k_re_aya_digits), RE(k_re_gpt4o)}},
    {"KIMI_K2", {RE(k_re_kimi)}},
    {"SUPERBPE", {RE("\\p{N}+"), RE("(?=(\\d{3})+(?!\\d))")}},
    {"BAILINGMOE", {RE(k_re_bailing)}},
    {"SEED_CODER", {RE(k_re_seed_coder)}},
    {"UFAKZEKA", {RE(k_re_ufakzeka)}},
    {"AFMOE", {{STEP_AFMOE_DIGITS, "\\p{N}+"}, RE(k_re_afmoe_cjk), RE(k_re_ds3_main)}},
    {"LAGUNA", {RE("[^\\n]+|[\\n]+"), RE(k_re_qwen2)}},
    {"EXAONE_MOE", {RE(k_re_exaone_moe)}},
    {"MINICPM5", {RE("\\p{N}{1,3}"), RE(k_re_minicpm5)}},
    /* llama.cpp's regexes for "default" (and for a file with no tokenizer.ggml.pre) */
    {"DEFAULT", {RE("[\\p{P}\\$\\+<=>\\^~\\|]+"), RE(k_re_gpt2), RE("\\p{N}+"), RE("[0-9][0-9][0-9]")}},
};
#undef RE
#define N_DEFS ((int)(sizeof k_defs / sizeof k_defs[0]))

enum { F_IGNORE_MERGES = 1, F_ADD_BOS = 2 };

/* tokenizer.ggml.pre names, as llama.cpp's llama_vocab::impl::load maps them
 * (flags: the ignore_merges / add_bos it sets with them; clean_spaces is a
 * detokenizer setting and not applied here).  "gpt2" is this project's name for
 * GPT-2's split (llama.cpp spells it gpt-2). */
static const struct {
    const char *name;
    const char *def; /* k_defs[].type */
    int flags;
} k_names[] = {
    {"gpt2", "GPT2", 0}, {"gpt-2", "GPT2", 0}, {"phi-2", "GPT2", 0}, {"jina-es", "GPT2", 0},
    {"jina-de", "GPT2", 0}, {"gigachat", "GPT2", 0}, {"jina-v2-es", "GPT2", 0}, {"jina-v2-de", "GPT2", 0},
    {"a.x-4.0", "GPT2", 0}, {"mellum", "GPT2", 0}, {"modern-bert", "GPT2", 0}, {"exaone4", "GPT2", 0},
    {"mpt", "GPT2", 0}, {"olmo", "GPT2", 0}, {"jais", "GPT2", 0}, {"trillion", "GPT2", 0},
    {"granite-docling", "GPT2", 0},
    {"starcoder", "STARCODER", 0}, {"refact", "STARCODER", 0}, {"command-r", "STARCODER", 0},
    {"smollm", "STARCODER", 0}, {"codeshell", "STARCODER", 0}, {"exaone", "STARCODER", 0},
    {"minerva-7b", "STARCODER", 0}, {"mellum2", "STARCODER", 0},
    {"llama3", "LLAMA3", F_IGNORE_MERGES | F_ADD_BOS}, {"llama-v3", "LLAMA3", F_IGNORE_MERGES | F_ADD_BOS},
    {"llama-bpe", "LLAMA3", F_IGNORE_MERGES | F_ADD_BOS}, {"falcon3", "LLAMA3", F_IGNORE_MERGES | F_ADD_BOS},
    {"falcon-h1", "LLAMA3", F_IGNORE_MERGES | F_ADD_BOS}, {"pixtral", "LLAMA3", F_IGNORE_MERGES | F_ADD_BOS},
    {"midm-2.0", "LLAMA3", F_IGNORE_MERGES | F_ADD_BOS}, {"lfm2", "LLAMA3", F_IGNORE_MERGES | F_ADD_BOS},
    {"jina-v5-nano", "LLAMA3", F_IGNORE_MERGES | F_ADD_BOS},
    {"dbrx", "LLAMA3", 0}, {"smaug-bpe", "LLAMA3", 0}, {"glm4", "LLAMA3", 0}, {"chatglm-bpe", "LLAMA3", 0},
    {"qwen2", "QWEN2", 0}, {"deepseek-r1-qwen", "QWEN2", 0}, {"kormo", "QWEN2", 0}, {"f2llmv2", "QWEN2", 0},
    {"megrez", "QWEN2", 0}, {"stablelm2", "QWEN2", 0}, {"hunyuan", "QWEN2", 0}, {"solar-open", "QWEN2", 0},
    {"grok-2", "QWEN2", 0},
    {"qwen35", "QWEN35", 0},
    {"jais-2", "JAIS2", 0},
    {"deepseek-llm", "DEEPSEEK_LLM", 0},
    {"deepseek-v3", "DEEPSEEK3_LLM", 0}, {"hunyuan-dense", "DEEPSEEK3_LLM", 0}, {"joyai-llm", "DEEPSEEK3_LLM", 0},
    {"hy_v4", "DEEPSEEK3_LLM", 0},
    {"spark2_5", "SPARK2_5", 0},
    {"youtu", "YOUTU", F_IGNORE_MERGES},
    {"deepseek-coder", "DEEPSEEK_CODER", 0},
    {"falcon", "FALCON", 0},
    {"poro-chat", "BLOOM", 0}, {"bloom", "BLOOM", 0}, {"gpt3-finnish", "BLOOM", 0},
    {"viking", "VIKING", 0},
    {"tekken", "TEKKEN", F_IGNORE_MERGES | F_ADD_BOS},
    {"chameleon", "CHAMELEON", F_ADD_BOS},
    {"gpt-4o", "GPT4O", 0}, {"llama4", "GPT4O", 0}, {"kanana2", "GPT4O", 0}, {"talkie", "GPT4O", 0},
    {"minimax-m2", "GPT4O", 0},
    {"granite-embed-multi-97m", "GRANITE_EMB_MULTI", F_IGNORE_MERGES},
    {"tiny_aya", "TINY_AYA", 0}, {"cohere2moe", "TINY_AYA", 0},
    {"kimi-k2", "KIMI_K2", 0},
    {"superbpe", "SUPERBPE", 0},
    {"bailingmoe", "BAILINGMOE", 0}, {"bailingmoe2", "BAILINGMOE", 0}, {"llada-moe", "BAILINGMOE", 0},
    {"seed-coder", "SEED_CODER", 0},
    {"ufakzeka", "UFAKZEKA", 0},
    {"afmoe", "AFMOE", 0},
    {"laguna", "LAGUNA", 0},
    {"exaone-moe", "EXAONE_MOE", 0},
    {"minicpm5", "MINICPM5", F_IGNORE_MERGES},
    {"default", "DEFAULT", 0},
};

/* Names llama.cpp knows whose tokenizer needs what this one lacks. */
static const struct {
    const char *name, *why;
} k_refused[] = {
    {"gemma4", "SentencePiece-style BPE over raw UTF-8 with spaces as U+2581 (no byte-level encoding)"},
    {"granite-embed-multi-311m", "SentencePiece-style BPE over raw UTF-8 with spaces as U+2581 (no byte-level encoding)"},
    {"sarvam-moe", "SentencePiece-style BPE over raw UTF-8 with spaces as U+2581 (no byte-level encoding)"},
    {"whitespace", "whitespace-dropping BPE over raw UTF-8 (no byte-level encoding)"},
    {"jina-v1-en", "a SEP token appended to every input (add_sep)"},
    {"jina-v2-code", "a SEP token appended to every input (add_sep)"},
    {"roberta-bpe", "a SEP token appended to every input (add_sep)"},
};

static int def_index(const char *type) {
    for (int i = 0; i < N_DEFS; i++)
        if (strcmp(k_defs[i].type, type) == 0) return i;
    return -1;
}

int ls_pretok_lookup(const char *name, ls_pretok_info *info, const char **why) {
    for (size_t i = 0; i < sizeof k_names / sizeof k_names[0]; i++)
        if (strcmp(name, k_names[i].name) == 0) {
            info->def = def_index(k_names[i].def);
            info->ignore_merges = k_names[i].flags & F_IGNORE_MERGES;
            info->add_bos = k_names[i].flags & F_ADD_BOS;
            return 0;
        }
    for (size_t i = 0; i < sizeof k_refused / sizeof k_refused[0]; i++)
        if (strcmp(name, k_refused[i].name) == 0) {
            if (why) *why = k_refused[i].why;
            return -2;
        }
    return -1;
}

/* One name per pre-tokenizer (the first in k_names that selects it), then a
 * pointer to the full list: all ~85 names do not fit an ls_err message. */
const char *ls_pretok_supported_names(void) {
    static char buf[400];
    if (!buf[0]) { /* built once; the table is constant (a racing second build writes the same bytes) */
        char tmp[sizeof buf];
        int at = 0;
        for (int d = 0; d < N_DEFS; d++)
            at += snprintf(tmp + at, sizeof tmp - (size_t)at, "%s%s", d ? ", " : "", ls_pretok_def_name(d));
        snprintf(tmp + at, sizeof tmp - (size_t)at, " (and llama.cpp's other names for these: %d in all, "
                 "listed in docs/supported.md)", (int)(sizeof k_names / sizeof k_names[0]));
        memcpy(buf, tmp, sizeof buf);
    }
    return buf;
}

int ls_pretok_count(void) { return N_DEFS; }

const char *ls_pretok_def_name(int def) {
    if (def < 0 || def >= N_DEFS) return NULL;
    for (size_t i = 0; i < sizeof k_names / sizeof k_names[0]; i++)
        if (strcmp(k_names[i].def, k_defs[def].type) == 0) return k_names[i].name;
    return NULL;
}

/* ---- running them ---- */

static pcre2_code *compile(const char *pat, ls_err *err) {
    int ec;
    PCRE2_SIZE eo;
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)pat, PCRE2_ZERO_TERMINATED,
                                   PCRE2_UTF | PCRE2_UCP | PCRE2_DOLLAR_ENDONLY, &ec, &eo, NULL);
    if (!re) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(ec, msg, sizeof msg);
        ls_err_set(err, LS_E_UNSUPPORTED, "tokenizer: PCRE2 cannot compile the pre-tokenizer regex: %s",
                   (const char *)msg);
        return NULL;
    }
    /* JIT where the platform allows it; the interpreter otherwise (same matches). */
    (void)pcre2_jit_compile(re, PCRE2_JIT_COMPLETE);
    return re;
}

ls_status ls_pretok_init(ls_pretok *p, int def, ls_err *err) {
    memset(p, 0, sizeof *p);
    if (def < 0 || def >= N_DEFS) {
        ls_err_set(err, LS_E_UNSUPPORTED, "tokenizer: no such pre-tokenizer (%d)", def);
        return LS_E_UNSUPPORTED;
    }
    for (int i = 0; i < LS_PRETOK_MAX_STEPS && k_defs[def].steps[i].re; i++) {
        p->kind[i] = k_defs[def].steps[i].kind;
        if (!(p->re[i] = compile(k_defs[def].steps[i].re, err))) {
            ls_pretok_free(p);
            return err ? err->code : LS_E_UNSUPPORTED;
        }
        p->n = i + 1;
    }
    return LS_OK;
}

void ls_pretok_free(ls_pretok *p) {
    for (int i = 0; i < LS_PRETOK_MAX_STEPS; i++) pcre2_code_free((pcre2_code *)p->re[i]);
    memset(p, 0, sizeof *p);
}

void *ls_pretok_match_data(const ls_pretok *p) {
    /* only the whole match is read: one ovector pair is enough (pcre2_match then
     * returns 0 for patterns with groups, still with the match in pair 0) */
    (void)p;
    return pcre2_match_data_create(1, NULL);
}

void ls_pretok_match_data_free(void *md) { pcre2_match_data_free((pcre2_match_data *)md); }

/* Length of the UTF-8 character at s (valid input). */
static size_t char_len(const unsigned char *s) {
    return s[0] < 0x80 ? 1 : s[0] < 0xE0 ? 2 : s[0] < 0xF0 ? 3 : 4;
}

typedef struct {
    const ls_pretok *p;
    pcre2_match_data *md;
    ls_pretok_piece_fn fn;
    void *ctx;
} runner;

static void run_step(const runner *r, int k, const char *s, size_t n);

/* afmoe's digit step (unicode.cpp's unicode_regex_split_custom_afmoe): each run of
 * \p{N} (found by re) gives its first len % 3 characters, then groups of three;
 * the text since the previous run goes into the piece of the run's first group;
 * what follows the last run is a piece. */
static void afmoe_digits(const runner *r, int k, const char *s, size_t n) {
    const pcre2_code *re = r->p->re[k];
    size_t prev = 0, off = 0;
    while (off < n) {
        int rc = pcre2_match(re, (PCRE2_SPTR)s, n, off, PCRE2_NO_UTF_CHECK, r->md, NULL);
        if (rc < 0) break;
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(r->md);
        size_t ms = ov[0], me = ov[1], cps = 0, at;
        for (at = ms; at < me; at += char_len((const unsigned char *)s + at)) cps++;
        size_t first = cps % 3 ? cps % 3 : 3;
        at = ms;
        while (at < me) {
            for (size_t c = 0; c < first; c++) at += char_len((const unsigned char *)s + at);
            run_step(r, k + 1, s + prev, at - prev);
            prev = at;
            first = 3;
        }
        off = me;
    }
    if (prev < n) run_step(r, k + 1, s + prev, n - prev);
}

/* Step k on s[0..n): matches and the text between them are pieces for step k + 1;
 * an empty match splits the text there. */
static void run_step(const runner *r, int k, const char *s, size_t n) {
    if (n == 0) return;
    if (k == r->p->n) {
        r->fn(r->ctx, s, n);
        return;
    }
    if (r->p->kind[k] == STEP_AFMOE_DIGITS) {
        afmoe_digits(r, k, s, n);
        return;
    }
    const pcre2_code *re = r->p->re[k];
    size_t off = 0, pos = 0; /* off: start of the pending text; pos: where to search */
    while (pos < n) {
        int rc = pcre2_match(re, (PCRE2_SPTR)s, n, pos, PCRE2_NO_UTF_CHECK, r->md, NULL);
        if (rc < 0) break; /* PCRE2_ERROR_NOMATCH, or a match limit: the rest is one piece */
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(r->md);
        size_t ms = ov[0], me = ov[1];
        if (ms > off) run_step(r, k + 1, s + off, ms - off);
        off = ms;
        if (me > ms) {
            run_step(r, k + 1, s + ms, me - ms);
            off = pos = me;
        } else {
            if (ms >= n) break;
            pos = ms + char_len((const unsigned char *)s + ms);
        }
    }
    run_step(r, k + 1, s + off, n - off);
}

void ls_pretok_run(const ls_pretok *p, void *md, const char *s, size_t n, ls_pretok_piece_fn piece, void *ctx) {
    runner r = {p, md, piece, ctx};
    run_step(&r, 0, s, n);
}

typedef struct {
    const char *base;
    size_t *ends, cap, count;
} split_ctx;

static void split_piece(void *ctx, const char *s, size_t n) {
    split_ctx *c = ctx;
    if (c->count < c->cap) c->ends[c->count] = (size_t)(s - c->base) + n;
    c->count++;
}

int ls_pretok_split(const char *name, const char *s, size_t n, size_t *ends, size_t cap, size_t *count) {
    ls_pretok_info info;
    ls_pretok p;
    *count = 0;
    if (ls_pretok_lookup(name, &info, NULL) != 0) return -1;
    if (ls_pretok_init(&p, info.def, NULL) != LS_OK) return -2;
    void *md = ls_pretok_match_data(&p);
    split_ctx c = {s, ends, cap, 0};
    ls_pretok_run(&p, md, s, n, split_piece, &c);
    ls_pretok_match_data_free(md);
    ls_pretok_free(&p);
    *count = c.count;
    return c.count > cap ? -3 : 0;
}
