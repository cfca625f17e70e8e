/* chat.h - chat prompt formats produced by code, not by a template engine.
 *
 * The model's own template (GGUF tokenizer.chat_template, or a Hugging Face
 * folder's tokenizer_config.json "chat_template" / chat_template.jinja) only
 * decides WHICH format to use:
 *   LZ_CHAT_LLAMA3:  <|start_header_id|>role<|end_header_id|>\n\n content <|eot_id|> ...
 *                    then <|start_header_id|>assistant<|end_header_id|>\n\n
 *   LZ_CHAT_LLAMA31: the same, plus Llama-3.1's system block that always
 *                    comes first ("Cutting Knowledge Date: December 2023\n
 *                    Today Date: 26 Jul 2024\n\n" + system message)
 *   LZ_CHAT_PLAIN:   "system\n\nUser: ...\nAssistant: ...\n...Assistant:"
 * Contents are trimmed of leading/trailing whitespace as the Llama-3
 * templates do. BOS is never part of the text: encode the result with
 * LZ_TOK_BOS | LZ_TOK_SPECIAL (the headers are special tokens).
 */
#ifndef LZ_CHAT_H
#define LZ_CHAT_H

#include <stddef.h>

typedef enum { LZ_CHAT_PLAIN = 0, LZ_CHAT_LLAMA3 = 1, LZ_CHAT_LLAMA31 = 2 } lz_chat_format;

/* When to format a CLI prompt as a chat (see lz_chat_prompt). */
typedef enum {
    LZ_CHAT_AUTO = 0, /* Llama-3 format when the model's template is Llama-3's, plain when it
                         has another template, the raw prompt when it has none */
    LZ_CHAT_ON = 1,   /* always: Llama-3 format if the template is Llama-3's, else plain */
    LZ_CHAT_OFF = 2   /* never: the raw prompt */
} lz_chat_mode;

typedef struct {
    const char *role;    /* "system", "user", "assistant", ... */
    const char *content;
} lz_chat_msg;

/* Reads a model's chat template: GGUF file (tokenizer.chat_template) or
 * Hugging Face folder (tokenizer_config.json "chat_template", a string or a
 * list of {name, template} whose "default" entry is used; else
 * chat_template.jinja). *out is malloc'd, or NULL when the model has none.
 * Returns 0, or non-zero with a message in err when a file exists but cannot
 * be read or parsed. */
int lz_chat_template_load(const char *model_path, char **out, char *err, size_t errlen);
int lz_chat_template_hf(const char *dir, char **out, char *err, size_t errlen);

/* Which format a template calls for (NULL: plain). */
lz_chat_format lz_chat_detect(const char *tmpl);
const char *lz_chat_format_name(lz_chat_format f);

/* Formats n messages; with add_assistant the assistant header (or
 * "Assistant:") follows so the model writes the reply. *out is malloc'd.
 * Returns 0, or -1 on allocation failure. */
int lz_chat_format_msgs(lz_chat_format f, const lz_chat_msg *msgs, int n, int add_assistant, char **out);

/* For command-line tools: the text to encode for one user turn (system may
 * be NULL). *is_chat tells whether chat formatting was applied (then encode
 * with LZ_TOK_SPECIAL); *fmt which format. Returns 0, or non-zero with a
 * message in err (template unreadable, out of memory). */
int lz_chat_prompt(const char *model_path, lz_chat_mode mode, const char *system, const char *user, char **out,
                   int *is_chat, lz_chat_format *fmt, char *err, size_t errlen);

#endif /* LZ_CHAT_H */
