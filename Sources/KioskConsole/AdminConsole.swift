import Foundation
import KioskRPC
import KioskStore
import NIOConcurrencyHelpers
import NIOCore
import NIOHTTP1
import NIOPosix

/// The store's admin console: web pages served by the store on a port of their own, for an operator with an admin
/// service credential (`kiosk-store service create --role admin`).
///
/// Server-rendered HTML with SVG charts; no JavaScript. Every page and action needs a session: signing in with the
/// credential gives an `HttpOnly`, `SameSite=Strict` cookie (`Secure` over TLS) that ends after
/// ``Configuration-swift.struct/idleTimeout`` idle, ``Configuration-swift.struct/sessionLifetime`` in all, on
/// sign-out, or when the credential is revoked. Every form carries the session's CSRF token; a POST without it, or
/// from another origin, is refused (403) and does nothing. A sign-in takes ``Configuration-swift.struct/signInTime``
/// whether the credential is good or not, and an address that failed
/// ``Configuration-swift.struct/failedSignInsPerMinute`` times within a minute is refused (429) for the rest of it.
///
/// Each action calls the same ``Store`` methods as the Admin RPCs and `kiosk-store`, as the signed-in operator
/// (``Store/acting(as:_:)``): its events name `console <credential id> (<name>)`.
public final class AdminConsole: Sendable {
    /// How the console serves.
    public struct Configuration: Sendable {
        /// A session without a request for this long ends.
        public var idleTimeout: Duration = .seconds(30 * 60)
        /// A session ends this long after sign-in, used or not.
        public var sessionLifetime: Duration = .seconds(8 * 60 * 60)
        /// Every sign-in answers this long after it arrived, good or bad: its timing tells nothing.
        public var signInTime: Duration = .milliseconds(400)
        /// Failed sign-ins from one address within a minute after which it is refused (429).
        public var failedSignInsPerMinute = 10
        /// Sessions open at once, at most: the oldest is ended for a new one.
        public var maxSessions = 256
        /// The connection cap, body cap and timeouts of its HTTP server.
        public var limits = SideHTTPServer.Limits(maxConnections: 64, maxBody: 16 * 1024)

        /// The defaults: 30 min idle, 8 h in all, 400 ms a sign-in, 10 failures a minute.
        public init() {}
    }

    /// The session cookie's name over plaintext (loopback).
    public static let cookieName = "kiosk_console"
    /// The session cookie's name over TLS: the `__Host-` prefix makes a browser keep it only when it is `Secure`,
    /// has `Path=/` and no `Domain`, so no other site or port can set it.
    public static let secureCookieName = "__Host-kiosk_console"

    /// The session cookie's name when served with `secure` (TLS) or not.
    public static func sessionCookieName(secure: Bool) -> String { secure ? secureCookieName : cookieName }

    /// The sign-in form's CSRF cookie (set before there is a session).
    static func signInCookieName(secure: Bool) -> String {
        secure ? "__Host-kiosk_console_signin" : "kiosk_console_signin"
    }

    let store: Store
    let configuration: Configuration
    let sessions: ConsoleSessions
    private let server = NIOLockedValueBox<SideHTTPServer?>(nil)

    /// A console for `store`; ``start(host:port:tls:)`` listens.
    public init(store: Store, configuration: Configuration = Configuration()) {
        self.store = store
        self.configuration = configuration
        sessions = ConsoleSessions(
            idleTimeoutMs: configuration.idleTimeout.wholeMilliseconds,
            lifetimeMs: configuration.sessionLifetime.wholeMilliseconds, maxSessions: configuration.maxSessions)
    }

    /// Listens on `host`:`port` (0: a port the system picks; see ``port``), HTTPS with `tls` (then the cookie is
    /// `Secure`). Plaintext only on loopback.
    public func start(
        host: String = "127.0.0.1", port: Int = 0, tls: ServerTLSIdentity? = nil,
        group: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton
    ) async throws {
        let secure = tls != nil
        let http = SideHTTPServer(limits: configuration.limits, group: group) { [self] request in
            var response = await self.answer(request, secure: secure)
            response.headers += Self.securityHeaders
            return response
        }
        try await http.start(host: host, port: port, tls: tls)
        server.withLockedValue { $0 = http }
    }

    /// The port listened on (0 before ``start(host:port:tls:group:)``).
    public var port: Int { server.withLockedValue { $0 }?.port ?? 0 }

    /// Stops listening and closes open connections.
    public func shutdown() async { await server.withLockedValue { $0 }?.shutdown() }

    /// Sent with every answer: no script, no framing, nothing cached, no referrer to another site (a same-origin
    /// policy, not `no-referrer`: with that, browsers send `Origin: null` on the forms' POSTs).
    static let securityHeaders: [(String, String)] = [
        (
            "Content-Security-Policy",
            "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
        ),
        ("X-Frame-Options", "DENY"), ("X-Content-Type-Options", "nosniff"), ("Referrer-Policy", "same-origin"),
        ("Cache-Control", "no-store"),
    ]

    var nowMs: Int64 { store.configuration.clock.nowMs }

    /// One request's answer.
    func answer(_ request: SideHTTPServer.Request, secure: Bool) async -> SideHTTPServer.Response {
        let method = request.head.method
        let path = request.path
        if path == "/console.css" { return .init(status: 200, contentType: "text/css", body: Array(Self.css.utf8)) }
        if path == "/favicon.ico" { return .text(404, "no icon") }
        if path == "/signin" {
            if method == .POST { return await signIn(request, secure: secure) }
            return signInPage(secure: secure, token: Self.signInToken(request, secure: secure))
        }
        guard method == .GET || method == .HEAD || method == .POST else { return .text(405, "GET or POST only") }
        let cookie = cookies(request.head.headers.first(name: "Cookie"))[Self.sessionCookieName(secure: secure)]
        guard let session = sessions.session(cookie, nowMs: nowMs), let cookie else {
            return method == .POST ? .text(403, "sign in first (/signin)") : redirect("/signin")
        }
        // The session's credential must still be an admin's: revoking it ends its sessions. A ledger that does not
        // answer ends none.
        switch await credentialIsLive(session.credentialID) {
        case true?: break
        case false?:
            sessions.end(cookie)
            return redirect("/signin")
        case nil:
            return .text(503, "the ledger did not answer; try again")
        }
        // A HEAD gets the headers only, and takes nothing (a message left for the next page stays).
        if method == .HEAD { return .init(status: 200, contentType: "text/html; charset=utf-8", body: []) }
        if method == .POST {
            guard sameOrigin(request), let form = Optional(FormData(String(decoding: request.body, as: UTF8.self))),
                let token = form["csrf"], ConsoleSessions.equal(token, session.csrf)
            else {
                return page("Refused", status: 403, session: session, cookie: cookie) { html in
                    html.element(
                        "p",
                        "The form was not one this console gave you (its CSRF token or origin is wrong). Nothing was done."
                    )
                }
            }
            return await act(path, form, session: session, cookie: cookie, secure: secure)
        }
        let query = FormData(request.query)
        switch path {
        case "/": return await overview(session: session, cookie: cookie)
        case "/products": return products(session: session, cookie: cookie)
        case "/accounts": return await accounts(query["q"], session: session, cookie: cookie)
        case "/refunds": return await refunds(query["state"] ?? "pending", session: session, cookie: cookie)
        case "/webhooks": return await webhooks(query["state"], session: session, cookie: cookie)
        case "/keys": return await keys(session: session, cookie: cookie)
        case "/codes": return await codes(session: session, cookie: cookie)
        case "/activity": return await activity(session: session, cookie: cookie)
        default:
            return page("Not found", status: 404, session: session, cookie: cookie) { html in
                html.element("p", "There is no page \(path).")
            }
        }
    }

    /// A POST's `Origin` (or, without one, `Referer`), when sent, names this console's host.
    private func sameOrigin(_ request: SideHTTPServer.Request) -> Bool {
        guard let host = request.head.headers.first(name: "Host") else { return false }
        let origin = request.head.headers.first(name: "Origin") ?? request.head.headers.first(name: "Referer")
        guard let origin, origin != "null" else { return request.head.headers.first(name: "Origin") == nil }
        return origin == "http://\(host)" || origin == "https://\(host)" || origin.hasPrefix("http://\(host)/")
            || origin.hasPrefix("https://\(host)/")
    }

    /// True while credential `id` is an admin's and not revoked; nil when the ledger did not answer.
    private func credentialIsLive(_ id: String) async -> Bool? {
        let ledger = store.ledger
        guard let credentials = try? await ledger.offload({ try ledger.serviceCredentials() }) else { return nil }
        return credentials.contains { $0.id == id && $0.revokedMs == 0 && $0.role == .admin }
    }

    func redirect(_ location: String, cookies: [String] = []) -> SideHTTPServer.Response {
        .init(
            status: 303, contentType: "text/plain; charset=utf-8", body: Array("see \(location)\n".utf8),
            headers: [("Location", location)] + cookies.map { ("Set-Cookie", $0) })
    }

    func cookie(_ name: String, _ value: String, secure: Bool, maxAge: Int64) -> String {
        "\(name)=\(value); Path=/; HttpOnly; SameSite=Strict; Max-Age=\(maxAge)\(secure ? "; Secure" : "")"
    }

    // MARK: Signing in

    /// The sign-in form's token the browser holds already (a page loaded twice, in two tabs, keeps one token).
    private static func signInToken(_ request: SideHTTPServer.Request, secure: Bool) -> String? {
        let held = cookies(request.head.headers.first(name: "Cookie"))[signInCookieName(secure: secure)]
        guard let held, held.utf8.count == 64, [UInt8](hex: held) != nil else { return nil }
        return held
    }

    private func signInPage(
        secure: Bool, token held: String? = nil, error: String? = nil, status: Int = 200
    ) -> SideHTTPServer.Response {
        let token = held ?? ConsoleSessions.token()
        var html = HTML()
        html.raw("<main class=\"signin\"><h1>Kiosk admin console</h1>")
        if let error { html.element("p", error, attributes: "class=\"flash error\"") }
        html.raw("<form method=\"post\" action=\"/signin\">")
        html.raw("<input type=\"hidden\" name=\"csrf\" value=\"\(token)\">")
        html.raw("<label for=\"credential\">Admin credential</label>")
        html.raw(
            "<input type=\"password\" id=\"credential\" name=\"credential\" autocomplete=\"current-password\" required maxlength=\"200\">"
        )
        html.raw("<button type=\"submit\">Sign in</button></form>")
        html.element(
            "p", "An admin service credential: kiosk-store service create --role admin.", attributes: "class=\"hint\"")
        html.raw("</main>")
        return Self.document(
            status: status, title: "Sign in", body: html.markup,
            headers: [("Set-Cookie", cookie(Self.signInCookieName(secure: secure), token, secure: secure, maxAge: 900))]
        )
    }

    private func signIn(_ request: SideHTTPServer.Request, secure: Bool) async -> SideHTTPServer.Response {
        let started = ContinuousClock.now
        let address = request.remoteAddress ?? "unknown"
        let form = FormData(String(decoding: request.body, as: UTF8.self))
        let held = Self.signInToken(request, secure: secure)
        var outcome: SideHTTPServer.Response
        if !sameOrigin(request) || held == nil || !ConsoleSessions.equal(form["csrf"] ?? "", held ?? "") {
            outcome = signInPage(
                secure: secure, error: "The sign-in form expired or came from elsewhere; try again.", status: 403)
        } else {
            // Counted before the lookup, so that guesses sent at once count at once; forgiven if it was good.
            let throttled = sessions.isThrottled(address, nowMs: nowMs, limit: configuration.failedSignInsPerMinute)
            let attempt = sessions.noteFailure(from: address, nowMs: nowMs)
            // The lookup is by the secret's hash, whatever was typed: a good and a bad credential cost the same.
            let caller = try? await store.caller(token: form["credential"] ?? "-")
            if case .service(let credential)? = caller, credential.role == .admin {
                // A good credential signs in even from an address that failed often: a guesser cannot lock the
                // operators out (the secrets are 256-bit; the limit only answers guesses 429).
                sessions.forgive(address, attempt)
                let id = sessions.create(credentialID: credential.id, name: credential.name, nowMs: nowMs)
                outcome = redirect(
                    "/",
                    cookies: [
                        cookie(
                            Self.sessionCookieName(secure: secure), id, secure: secure,
                            maxAge: sessions.lifetimeMs / 1000),
                        cookie(Self.signInCookieName(secure: secure), "", secure: secure, maxAge: 0),
                    ])
            } else if throttled {
                outcome = signInPage(
                    secure: secure, token: held, error: "Too many failed sign-ins from this address; wait a minute.",
                    status: 429)
            } else {
                outcome = signInPage(
                    secure: secure, token: held, error: "That is not an admin credential of this store.", status: 401)
            }
        }
        try? await Task.sleep(until: started + configuration.signInTime, clock: .continuous)
        return outcome
    }

    // MARK: Pages

    /// A page of the signed-in console: the navigation, the flash message, then `body`.
    func page(
        _ title: String, status: Int = 200, session: ConsoleSessions.Session, cookie: String,
        _ body: (inout HTML) -> Void
    ) -> SideHTTPServer.Response {
        var html = HTML()
        html.raw("<header><nav>")
        for (path, name) in [
            ("/", "Overview"), ("/products", "Products"), ("/accounts", "Accounts"), ("/refunds", "Refund requests"),
            ("/webhooks", "Webhooks"), ("/codes", "Offer codes"), ("/keys", "Keys and credentials"),
            ("/activity", "Activity"),
        ] {
            html.raw("<a href=\"\(path)\">\(HTML.escape(name))</a>")
        }
        html.raw("</nav><div class=\"who\">")
        html.text("\(session.credentialName) (\(session.credentialID)) · \(store.configuration.environment.name)")
        html.postButton("Sign out", action: "/signout", csrf: session.csrf)
        html.raw("</div></header><main>")
        html.element("h1", title)
        if let flash = sessions.takeFlash(cookie) {
            html.element("p", flash.text, attributes: "class=\"flash\(flash.isError ? " error" : "")\" id=\"flash\"")
        }
        body(&html)
        html.raw("</main>")
        return Self.document(status: status, title: title, body: html.markup)
    }

    static func document(
        status: Int, title: String, body: String, headers: [(String, String)] = []
    ) -> SideHTTPServer.Response {
        let markup = """
            <!doctype html>
            <html lang="en"><head><meta charset="utf-8"><title>\(HTML.escape(title)) · Kiosk</title>
            <meta name="viewport" content="width=device-width, initial-scale=1">
            <link rel="stylesheet" href="/console.css"></head>
            <body>\(body)</body></html>
            """
        return .init(
            status: status, contentType: "text/html; charset=utf-8", body: Array(markup.utf8), headers: headers)
    }

    /// An error page for a failed read.
    func failure(_ error: any Error, session: ConsoleSessions.Session, cookie: String) -> SideHTTPServer.Response {
        page("The ledger did not answer", status: 503, session: session, cookie: cookie) { html in
            html.element("p", "\(error)", attributes: "class=\"flash error\"")
        }
    }

    static let css = """
        body{font:14px/1.4 system-ui,sans-serif;margin:0;color:#222;background:#fafafa}
        header{display:flex;justify-content:space-between;align-items:center;background:#1d2b3a;color:#fff;padding:6px 16px}
        header a{color:#fff;margin-right:14px;text-decoration:none}header a:hover{text-decoration:underline}
        .who{display:flex;gap:8px;align-items:center;font-size:12px}
        main{padding:8px 24px 40px;max-width:1100px}h1{font-size:22px}h2{font-size:17px;margin-top:28px}
        table{border-collapse:collapse;margin:6px 0 14px;background:#fff}
        th,td{border:1px solid #ddd;padding:4px 8px;text-align:left;vertical-align:top;font-size:13px}
        th{background:#eef1f5}td form{margin:0}
        form.inline{display:inline-flex;gap:4px;margin:2px 0}input[type=text],input[type=password]{padding:4px 6px}
        button{padding:4px 10px;border:1px solid #1d2b3a;background:#fff;border-radius:3px;cursor:pointer}
        button.danger{border-color:#a32;color:#a32}.flash{padding:8px 12px;background:#e6f4ea;border:1px solid #9c9}
        .flash.error{background:#fdecea;border-color:#d99}.empty,.hint{color:#777}
        .signin{max-width:380px;margin:80px auto}.signin form{display:flex;flex-direction:column;gap:8px}
        .cards{display:flex;gap:12px;flex-wrap:wrap}.card{background:#fff;border:1px solid #ddd;padding:8px 14px}
        .card b{display:block;font-size:20px}.chart{background:#fff;border:1px solid #ddd;max-width:100%;height:auto}
        .legend .key{margin-right:12px}.secret{font-family:monospace;background:#fff3cd;padding:8px;word-break:break-all}
        """
}
