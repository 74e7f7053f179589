#if os(Linux)
import Foundation
import Glibc

/// libcurl, loaded at run time from the `libcurl.so.4` that FoundationNetworking already needs, with the few
/// declarations the curl transport uses: no header package at build time, and no library linked by the package.
/// `nil` (``shared``) when it cannot be loaded or is older than 7.68 (`curl_multi_poll`, `curl_multi_wakeup`); the
/// transport then stays URLSession.
///
/// `curl_easy_setopt`, `curl_multi_setopt` and `curl_easy_getinfo` are variadic in C. Swift cannot call a variadic
/// function pointer, so each is called through a fixed prototype of the one argument it gets (a long, a pointer or a
/// 64-bit offset). On Linux (x86-64 System V and AArch64 AAPCS64) a variadic callee reads its arguments from the same
/// registers a fixed-argument call fills, which is what makes this sound there; Apple's arm64 ABI passes variadic
/// arguments on the stack, and this file is Linux only.
struct LibCurl: @unchecked Sendable {
    typealias Handle = OpaquePointer
    /// `size_t (*)(char *, size_t, size_t, void *)`: the write, header and read callbacks.
    typealias DataCallback = @convention(c) (UnsafeMutablePointer<CChar>?, Int, Int, UnsafeMutableRawPointer?) -> Int
    /// `int (*)(void *, curl_off_t, int)`: the seek callback.
    typealias SeekCallback = @convention(c) (UnsafeMutableRawPointer?, Int64, Int32) -> Int32

    let easyInit: @convention(c) () -> Handle?
    let easyCleanup: @convention(c) (Handle?) -> Void
    let easyReset: @convention(c) (Handle?) -> Void
    let easySetLong: @convention(c) (Handle?, Int32, Int) -> Int32
    let easySetPointer: @convention(c) (Handle?, Int32, UnsafeRawPointer?) -> Int32
    let easySetOffset: @convention(c) (Handle?, Int32, Int64) -> Int32
    let easyGetInfo: @convention(c) (Handle?, Int32, UnsafeMutableRawPointer?) -> Int32
    let easyPause: @convention(c) (Handle?, Int32) -> Int32
    let easyStrerror: @convention(c) (Int32) -> UnsafePointer<CChar>?
    let multiInit: @convention(c) () -> Handle?
    let multiSetLong: @convention(c) (Handle?, Int32, Int) -> Int32
    let multiCleanup: @convention(c) (Handle?) -> Int32
    let multiAdd: @convention(c) (Handle?, Handle?) -> Int32
    let multiRemove: @convention(c) (Handle?, Handle?) -> Int32
    let multiPerform: @convention(c) (Handle?, UnsafeMutablePointer<Int32>?) -> Int32
    let multiPoll: @convention(c) (Handle?, UnsafeMutableRawPointer?, UInt32, Int32, UnsafeMutablePointer<Int32>?) -> Int32
    let multiWakeup: @convention(c) (Handle?) -> Int32
    let multiInfoRead: @convention(c) (Handle?, UnsafeMutablePointer<Int32>?) -> UnsafeMutableRawPointer?
    let slistAppend: @convention(c) (OpaquePointer?, UnsafePointer<CChar>?) -> OpaquePointer?
    let slistFreeAll: @convention(c) (OpaquePointer?) -> Void
    /// The version text, such as `7.88.1`.
    let version: String

    /// libcurl, loaded once; `nil` when it cannot be.
    static let shared: LibCurl? = load()

    private static func load() -> LibCurl? {
        guard let library = dlopen("libcurl.so.4", RTLD_NOW | RTLD_LOCAL) else { return nil }
        func symbol<T>(_ name: String, as type: T.Type) -> T? {
            guard let address = dlsym(library, name) else { return nil }
            return unsafeBitCast(address, to: type)
        }
        typealias VersionInfo = @convention(c) (Int32) -> UnsafeRawPointer?
        typealias GlobalInit = @convention(c) (Int) -> Int32
        guard let versionInfo = symbol("curl_version_info", as: VersionInfo.self),
            let globalInit = symbol("curl_global_init", as: GlobalInit.self),
            let setopt = dlsym(library, "curl_easy_setopt"),
            let getinfo = dlsym(library, "curl_easy_getinfo"),
            let multiSetopt = dlsym(library, "curl_multi_setopt"),
            let easyInit = symbol("curl_easy_init", as: (@convention(c) () -> Handle?).self),
            let easyCleanup = symbol("curl_easy_cleanup", as: (@convention(c) (Handle?) -> Void).self),
            let easyReset = symbol("curl_easy_reset", as: (@convention(c) (Handle?) -> Void).self),
            let easyPause = symbol("curl_easy_pause", as: (@convention(c) (Handle?, Int32) -> Int32).self),
            let easyStrerror = symbol("curl_easy_strerror", as: (@convention(c) (Int32) -> UnsafePointer<CChar>?).self),
            let multiInit = symbol("curl_multi_init", as: (@convention(c) () -> Handle?).self),
            let multiCleanup = symbol("curl_multi_cleanup", as: (@convention(c) (Handle?) -> Int32).self),
            let multiAdd = symbol("curl_multi_add_handle", as: (@convention(c) (Handle?, Handle?) -> Int32).self),
            let multiRemove = symbol("curl_multi_remove_handle", as: (@convention(c) (Handle?, Handle?) -> Int32).self),
            let multiPerform = symbol(
                "curl_multi_perform", as: (@convention(c) (Handle?, UnsafeMutablePointer<Int32>?) -> Int32).self),
            let multiPoll = symbol(
                "curl_multi_poll",
                as: (@convention(c) (Handle?, UnsafeMutableRawPointer?, UInt32, Int32, UnsafeMutablePointer<Int32>?) -> Int32).self),
            let multiWakeup = symbol("curl_multi_wakeup", as: (@convention(c) (Handle?) -> Int32).self),
            let multiInfoRead = symbol(
                "curl_multi_info_read",
                as: (@convention(c) (Handle?, UnsafeMutablePointer<Int32>?) -> UnsafeMutableRawPointer?).self),
            let slistAppend = symbol(
                "curl_slist_append", as: (@convention(c) (OpaquePointer?, UnsafePointer<CChar>?) -> OpaquePointer?).self),
            let slistFreeAll = symbol("curl_slist_free_all", as: (@convention(c) (OpaquePointer?) -> Void).self)
        else { return nil }
        // `curl_version_info_data`: an int `age`, then `const char *version`, then `unsigned int version_num`.
        guard let info = versionInfo(Code.versionFirst) else { return nil }
        let versionText = info.load(fromByteOffset: 8, as: UnsafePointer<CChar>?.self).map { String(cString: $0) } ?? ""
        let versionNumber = info.load(fromByteOffset: 16, as: UInt32.self)
        guard versionNumber >= 0x07_44_00 else { return nil }  // 7.68: curl_multi_poll and curl_multi_wakeup
        // Thread-safe and counted since 7.84; FoundationNetworking calls it too.
        guard globalInit(Code.globalAll) == 0 else { return nil }
        return LibCurl(
            easyInit: easyInit, easyCleanup: easyCleanup, easyReset: easyReset,
            easySetLong: unsafeBitCast(setopt, to: (@convention(c) (Handle?, Int32, Int) -> Int32).self),
            easySetPointer: unsafeBitCast(setopt, to: (@convention(c) (Handle?, Int32, UnsafeRawPointer?) -> Int32).self),
            easySetOffset: unsafeBitCast(setopt, to: (@convention(c) (Handle?, Int32, Int64) -> Int32).self),
            easyGetInfo: unsafeBitCast(getinfo, to: (@convention(c) (Handle?, Int32, UnsafeMutableRawPointer?) -> Int32).self),
            easyPause: easyPause, easyStrerror: easyStrerror, multiInit: multiInit,
            multiSetLong: unsafeBitCast(multiSetopt, to: (@convention(c) (Handle?, Int32, Int) -> Int32).self),
            multiCleanup: multiCleanup,
            multiAdd: multiAdd, multiRemove: multiRemove, multiPerform: multiPerform, multiPoll: multiPoll,
            multiWakeup: multiWakeup, multiInfoRead: multiInfoRead, slistAppend: slistAppend, slistFreeAll: slistFreeAll,
            version: versionText)
    }

    /// The text libcurl gives for `code`.
    func describe(_ code: Int32) -> String {
        easyStrerror(code).map { String(cString: $0) } ?? "libcurl error \(code)"
    }

    /// The values of `curl.h` the transport uses (stable across libcurl 7.x and 8.x).
    enum Code {
        static let versionFirst: Int32 = 0  // CURLVERSION_FIRST: only the first fields are read
        static let globalAll = 3

        // Options: long (0 + n), pointer (10000 + n), function (20000 + n), curl_off_t (30000 + n).
        static let writeData: Int32 = 10001
        static let url: Int32 = 10002
        static let proxy: Int32 = 10004  // CURLOPT_PROXY: "" goes direct, whatever the environment says
        static let readData: Int32 = 10009
        static let writeFunction: Int32 = 20011
        static let readFunction: Int32 = 20012
        static let httpHeader: Int32 = 10023
        static let headerData: Int32 = 10029
        static let customRequest: Int32 = 10036
        static let noProgress: Int32 = 43
        static let noBody: Int32 = 44
        static let post: Int32 = 47
        static let followLocation: Int32 = 52
        static let freshConnect: Int32 = 74
        static let forbidReuse: Int32 = 75
        static let httpGet: Int32 = 80
        static let noSignal: Int32 = 99
        static let acceptEncoding: Int32 = 10102
        static let seekFunction: Int32 = 20167
        static let seekData: Int32 = 10168
        static let headerFunction: Int32 = 20079
        static let postFieldSizeLarge: Int32 = 30120
        static let protocols: Int32 = 181  // CURLOPT_PROTOCOLS
        static let redirectProtocols: Int32 = 182  // CURLOPT_REDIR_PROTOCOLS
        static let httpAndHTTPS = 1 | 2  // CURLPROTO_HTTP | CURLPROTO_HTTPS

        // Information: long (0x200000 + n), double (0x300000 + n), off_t (0x600000 + n).
        static let responseCode: Int32 = 0x20_0002
        static let connectionsMade: Int32 = 0x20_001A  // CURLINFO_NUM_CONNECTS: 0 when a kept-alive one was reused
        // Microseconds from the transfer's start to the end of each phase (curl_off_t; since 7.61).
        static let nameLookupTime: Int32 = 0x60_0033  // CURLINFO_NAMELOOKUP_TIME_T
        static let connectTime: Int32 = 0x60_0034  // CURLINFO_CONNECT_TIME_T
        static let appConnectTime: Int32 = 0x60_0038  // CURLINFO_APPCONNECT_TIME_T: the TLS handshake's end, 0 without

        static let maximumHostConnections: Int32 = 7  // CURLMOPT_MAX_HOST_CONNECTIONS
        static let messageDone: Int32 = 1  // CURLMSG_DONE
        static let writePause = 0x1000_0001  // CURL_WRITEFUNC_PAUSE
        static let readAbort = 0x1000_0000  // CURL_READFUNC_ABORT
        static let pauseNone: Int32 = 0  // CURLPAUSE_CONT
        static let seekOK: Int32 = 0
        static let seekFail: Int32 = 1
    }

    /// `CURLcode` values the transport tells apart.
    enum Result: Int32 {
        case ok = 0
        case unsupportedProtocol = 1
        case badURL = 3
        case cannotResolveProxy = 5
        case cannotResolveHost = 6
        case cannotConnect = 7
        case weirdServerReply = 8
        case http2 = 16
        case partialFile = 18
        case writeError = 23
        case readError = 26
        case timedOut = 28
        case abortedByCallback = 42
        case tooManyRedirects = 47
        case gotNothing = 52
        case sendError = 55
        case receiveError = 56
        case sslConnectError = 35
        case peerFailedVerification = 60
        case badContentEncoding = 61
        case sendFailRewind = 65
        case http2Stream = 92
    }
}
#endif
