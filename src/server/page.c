/* page.c - the chat page at GET / (src/server/page/: HTML, JS and CSS compiled into the
 * binary by the Makefile with `xxd -i`; nothing is fetched from elsewhere).  Served with a
 * strict Content-Security-Policy: scripts, styles and requests only from this origin, no
 * inline code, no framing.  See docs/server.md, "The chat page". */
#include <string.h>

#include "server/server_impl.h"

/* build/gen/page_assets.c (xxd -i of src/server/page/page.{html,js,css,svg}) */
extern unsigned char page_html[], page_js[], page_css[], page_svg[];
extern unsigned int page_html_len, page_js_len, page_css_len, page_svg_len;

#define LS_PAGE_CSP                                                                                           \
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; "          \
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

enum MHD_Result ls_srv_page(server *s, struct MHD_Connection *c, const char *url) {
    const unsigned char *body = page_html;
    size_t len = page_html_len;
    const char *ctype = "text/html; charset=utf-8";
    if (!strcmp(url, "/page.js")) body = page_js, len = page_js_len, ctype = "text/javascript; charset=utf-8";
    else if (!strcmp(url, "/page.css")) body = page_css, len = page_css_len, ctype = "text/css; charset=utf-8";
    else if (!strcmp(url, "/page.svg")) body = page_svg, len = page_svg_len, ctype = "image/svg+xml";
    struct MHD_Response *r = MHD_create_response_from_buffer(len, (void *)body, MHD_RESPMEM_PERSISTENT);
    if (!r) return MHD_NO;
    MHD_add_response_header(r, "Content-Type", ctype);
    MHD_add_response_header(r, "Content-Security-Policy", LS_PAGE_CSP);
    MHD_add_response_header(r, "X-Content-Type-Options", "nosniff");
    MHD_add_response_header(r, "X-Frame-Options", "DENY");
    MHD_add_response_header(r, "Referrer-Policy", "no-referrer");
    MHD_add_response_header(r, "Cache-Control", "no-cache");
    ls_srv_common_headers(s, c, r);
    sock *k = ls_srv_sock(c);
    if (k) k->status = 200;
    enum MHD_Result res = MHD_queue_response(c, 200, r);
    MHD_destroy_response(r);
    ls_srv_count_status(s, 200);
    return res;
}
