/* test_chat.c - chat template families: detection from template snippets, the
 * default system prompt of SmolLM2's template, the exact rendering of each family,
 * and the errors (no template, unknown template, unknown name, unknown role).
 * SmolLM2's real template is also checked against jinja2 in tests/python. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/chat.h"

static const char k_smollm2[] =
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}"
    "{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";

static ls_chat_family detect(const char *src, char **default_system) {
    ls_chat_template t;
    ls_err e;
    ls_err_clear(&e);
    ls_status st = ls_chat_template_detect(src, strlen(src), &t, &e);
    if (st != LS_OK) fail_msg("detect failed: %s", e.msg);
    ls_chat_family f = t.family;
    if (default_system) *default_system = t.default_system ? strdup(t.default_system) : NULL;
    ls_chat_template_free(&t);
    return f;
}

static void test_detect_families(void **state) {
    (void)state;
    assert_int_equal(detect(k_smollm2, NULL), LS_CHAT_CHATML);
    assert_int_equal(detect("{{'<|im_start|>' + message['role']}}", NULL), LS_CHAT_CHATML);
    assert_int_equal(detect("{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' }}", NULL),
                     LS_CHAT_LLAMA3);
    assert_int_equal(detect("{{ '<start_of_turn>' + role + '\\n' }}", NULL), LS_CHAT_GEMMA);
    assert_int_equal(detect("{{'<|user|>' + '\\n' + message['content'] + '<|end|>' + '\\n'}}", NULL), LS_CHAT_PHI3);
    assert_int_equal(detect("{{ '<|user|>\\n' + message['content'] + eos_token }}", NULL), LS_CHAT_ZEPHYR);
    assert_int_equal(detect("{{ '<|user|>\\n' + message['content'] + '</s>' }}", NULL), LS_CHAT_ZEPHYR);
    assert_int_equal(detect("{{ bos_token + '[INST] ' + '<<SYS>>\\n' + system + '\\n<</SYS>>\\n\\n' }}", NULL),
                     LS_CHAT_LLAMA2);
    assert_int_equal(detect("{{ '[INST] ' + message['content'] + ' [/INST]' }}", NULL), LS_CHAT_MISTRAL);
}

static void test_default_system(void **state) {
    (void)state;
    char *sys;
    assert_int_equal(detect(k_smollm2, &sys), LS_CHAT_CHATML);
    assert_non_null(sys);
    assert_string_equal(sys, "You are a helpful AI assistant named SmolLM, trained by Hugging Face");
    free(sys);
    /* Qwen-style: the newline is a Jinja escape, the prompt sits in an else branch */
    assert_int_equal(detect("{%- if messages[0]['role'] == 'system' %}{{- '<|im_start|>system\\n' + "
                            "messages[0]['content'] + '<|im_end|>\\n' }}{%- else %}{{- '<|im_start|>system\\n"
                            "You are Qwen, created by Alibaba Cloud. You\\'re helpful.<|im_end|>\\n' }}{%- endif %}",
                            &sys),
                     LS_CHAT_CHATML);
    assert_non_null(sys);
    assert_string_equal(sys, "You are Qwen, created by Alibaba Cloud. You're helpful.");
    free(sys);
    /* a plain ChatML template inserts none */
    assert_int_equal(detect("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
                            "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}",
                            &sys),
                     LS_CHAT_CHATML);
    assert_null(sys);
    /* by name: never a default system prompt */
    ls_chat_template t;
    ls_err e;
    assert_int_equal(ls_chat_template_by_name("chatml", &t, &e), LS_OK);
    assert_int_equal(t.family, LS_CHAT_CHATML);
    assert_null(t.default_system);
    ls_chat_template_free(&t);
}

static char *render(ls_chat_family f, const char *default_system, const ls_chat_msg *m, size_t n, bool gen) {
    ls_chat_template t = {f, default_system ? strdup(default_system) : NULL, false, NULL};
    char *out = NULL;
    ls_err e;
    ls_err_clear(&e);
    if (ls_chat_apply(&t, m, n, gen, &out, &e) != LS_OK) fail_msg("apply failed: %s", e.msg);
    ls_chat_template_free(&t);
    return out;
}

#define EXPECT_RENDER(f, sys, msgs, gen, want)                                      \
    do {                                                                            \
        char *got_ = render(f, sys, msgs, sizeof msgs / sizeof msgs[0], gen);       \
        assert_string_equal(got_, want);                                            \
        free(got_);                                                                 \
    } while (0)

static const ls_chat_msg k_conv[] = {
    {"system", "Be brief."},
    {"user", "Hi there"},
    {"assistant", "Hello!"},
    {"user", " What is 2+2? "},
};
static const ls_chat_msg k_user_only[] = {{"user", "Hi"}};

static void test_render_chatml(void **state) {
    (void)state;
    EXPECT_RENDER(LS_CHAT_CHATML, NULL, k_conv, true,
                  "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi there<|im_end|>\n"
                  "<|im_start|>assistant\nHello!<|im_end|>\n<|im_start|>user\n What is 2+2? <|im_end|>\n"
                  "<|im_start|>assistant\n");
    /* SmolLM2's default system prompt: only when messages[0] is not system */
    EXPECT_RENDER(LS_CHAT_CHATML, "SYS", k_user_only, true,
                  "<|im_start|>system\nSYS<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
    EXPECT_RENDER(LS_CHAT_CHATML, "SYS", k_conv, false,
                  "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi there<|im_end|>\n"
                  "<|im_start|>assistant\nHello!<|im_end|>\n<|im_start|>user\n What is 2+2? <|im_end|>\n");
    char *out = render(LS_CHAT_CHATML, "SYS", NULL, 0, true);
    assert_string_equal(out, "<|im_start|>assistant\n");
    free(out);
}

static void test_render_llama3(void **state) {
    (void)state;
    EXPECT_RENDER(LS_CHAT_LLAMA3, NULL, k_conv, true,
                  "<|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
                  "<|start_header_id|>user<|end_header_id|>\n\nHi there<|eot_id|>"
                  "<|start_header_id|>assistant<|end_header_id|>\n\nHello!<|eot_id|>"
                  "<|start_header_id|>user<|end_header_id|>\n\nWhat is 2+2?<|eot_id|>"
                  "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

static void test_render_gemma(void **state) {
    (void)state;
    EXPECT_RENDER(LS_CHAT_GEMMA, NULL, k_conv, true,
                  "<start_of_turn>user\nBe brief.\n\nHi there<end_of_turn>\n"
                  "<start_of_turn>model\nHello!<end_of_turn>\n"
                  "<start_of_turn>user\nWhat is 2+2?<end_of_turn>\n"
                  "<start_of_turn>model\n");
}

static void test_render_phi3_zephyr(void **state) {
    (void)state;
    EXPECT_RENDER(LS_CHAT_PHI3, NULL, k_conv, true,
                  "<|system|>\nBe brief.<|end|>\n<|user|>\nHi there<|end|>\n<|assistant|>\nHello!<|end|>\n"
                  "<|user|>\n What is 2+2? <|end|>\n<|assistant|>\n");
    EXPECT_RENDER(LS_CHAT_ZEPHYR, NULL, k_conv, true,
                  "<|system|>\nBe brief.</s>\n<|user|>\nHi there</s>\n<|assistant|>\nHello!</s>\n"
                  "<|user|>\n What is 2+2? </s>\n<|assistant|>\n");
}

static void test_render_llama2_mistral(void **state) {
    (void)state;
    EXPECT_RENDER(LS_CHAT_LLAMA2, NULL, k_conv, true,
                  "[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\nHi there [/INST] Hello! </s>"
                  "<s>[INST] What is 2+2? [/INST]");
    EXPECT_RENDER(LS_CHAT_LLAMA2, NULL, k_user_only, false, "[INST] Hi [/INST]");
    EXPECT_RENDER(LS_CHAT_MISTRAL, NULL, k_conv, true,
                  "[INST] Be brief.\n\nHi there [/INST]Hello!</s>[INST]  What is 2+2?  [/INST]");
}

static void test_errors(void **state) {
    (void)state;
    ls_chat_template t;
    ls_err e;
    ls_err_clear(&e);
    assert_int_equal(ls_chat_template_detect(NULL, 0, &t, &e), LS_E_UNSUPPORTED);
    assert_non_null(strstr(e.msg, "--chat-template"));
    assert_int_equal(ls_chat_template_detect("", 0, &t, &e), LS_E_UNSUPPORTED);
    assert_non_null(strstr(e.msg, "no chat template"));
    /* a template of no family renders through the Jinja engine */
    const char *odd = "{% for m in messages %}### {{ m['role'] }}: {{ m['content'] }}\n{% endfor %}";
    assert_int_equal(ls_chat_template_detect(odd, strlen(odd), &t, &e), LS_OK);
    assert_int_equal(t.family, LS_CHAT_JINJA);
    assert_string_equal(ls_chat_family_name(t.family), "jinja");
    char *r = NULL;
    assert_int_equal(ls_chat_apply(&t, k_user_only, 1, true, &r, &e), LS_OK);
    assert_string_equal(r, "### user: Hi\n");
    free(r);
    ls_chat_template_free(&t);
    /* one the engine cannot parse is refused, naming the line */
    const char *broken = "{% for m in messages %}\n{{ m.content }";
    assert_int_equal(ls_chat_template_detect(broken, strlen(broken), &t, &e), LS_E_UNSUPPORTED);
    assert_non_null(strstr(e.msg, "--chat-template"));
    assert_non_null(strstr(e.msg, "chatml"));
    assert_non_null(strstr(e.msg, "line 2"));
    assert_int_equal(t.family, LS_CHAT_UNKNOWN);
    ls_chat_template_free(&t);
    /* "jinja" is no family name for --chat-template */
    assert_int_equal(ls_chat_template_by_name("jinja", &t, &e), LS_E_INVALID);

    assert_int_equal(ls_chat_template_by_name("vicuna", &t, &e), LS_E_INVALID);
    assert_non_null(strstr(e.msg, "'vicuna'"));
    assert_non_null(strstr(e.msg, "llama3"));
    for (int f = LS_CHAT_CHATML; f <= LS_CHAT_ZEPHYR; f++) {
        assert_int_equal(ls_chat_template_by_name(ls_chat_family_name((ls_chat_family)f), &t, &e), LS_OK);
        assert_int_equal(t.family, f);
        ls_chat_template_free(&t);
    }
    assert_string_equal(ls_chat_family_name(LS_CHAT_UNKNOWN), "unknown");

    ls_chat_msg bad[] = {{"user", "hi"}, {"tool", "x"}};
    ls_chat_template ct = {LS_CHAT_CHATML, NULL, false, NULL};
    char *out = (char *)1;
    assert_int_equal(ls_chat_apply(&ct, bad, 2, true, &out, &e), LS_E_INVALID);
    assert_null(out);
    assert_non_null(strstr(e.msg, "'tool'"));
    ls_chat_msg nullrole[] = {{NULL, "x"}};
    assert_int_equal(ls_chat_apply(&ct, nullrole, 1, true, &out, &e), LS_E_INVALID);
    ls_chat_template unk = {LS_CHAT_UNKNOWN, NULL, false, NULL};
    assert_int_equal(ls_chat_apply(&unk, k_user_only, 1, true, &out, &e), LS_E_UNSUPPORTED);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_detect_families),
        cmocka_unit_test(test_default_system),
        cmocka_unit_test(test_render_chatml),
        cmocka_unit_test(test_render_llama3),
        cmocka_unit_test(test_render_gemma),
        cmocka_unit_test(test_render_phi3_zephyr),
        cmocka_unit_test(test_render_llama2_mistral),
        cmocka_unit_test(test_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
