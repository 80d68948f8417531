import Crypto
import Foundation
import KioskAPI
import KioskRPC
import KioskStore
import KioskWire
import Testing

@testable import KioskContent

@Suite(.timeLimit(.minutes(3))) struct DownloadTests {
    @Test func smallFilesDownloadByteForByte() async throws {
        let files: [String: [UInt8]] = ["file.empty": [], "file.one": [0x2A], "book.swift": proseBytes(700_000)]
        try await ContentFixture.with(files: files) { fixture in
            let token = try fixture.newAccount()
            let listed = try await fixture.contentClient.unary(
                "/kiosk.content.v1.Content/ListContent", request: ContentV1.ListContentRequest(),
                response: ContentV1.ListContentResponse.self)
            #expect(Set(listed.items.map(\.productID)) == Set(files.keys))
            for (product, original) in files {
                let item = try #require(listed.items.first { $0.productID == product })
                #expect(item.originalSize == UInt64(original.count))
                #expect(item.sha256 == Array(SHA256.hash(data: original)))
                let receipt = try await fixture.buy(product, token: token).signedReceipt
                let downloaded = try await fixture.download(product, receipt: receipt, token: token)
                #expect(downloaded.bytes == original, "\(product)")
                #expect(downloaded.sha256 == item.sha256)
                #expect(downloaded.header?.totalSize == UInt64(original.count))
                #expect(downloaded.header?.sha256 == item.sha256)
                #expect(downloaded.header?.contentVersion == "1.0")
            }
            let book = try #require(listed.items.first { $0.productID == "book.swift" })
            #expect(book.compressedSize < book.originalSize / 5, "prose compresses")
        }
    }

    @Test(arguments: ["big.random", "big.text"])
    func sixtyFourMiBDownloadsByteForByte(product: String) async throws {
        let original = product == "big.random" ? randomBytes(64 << 20) : proseBytes(64 << 20)
        try await ContentFixture.with(files: [product: original]) { fixture in
            let token = try fixture.newAccount()
            let receipt = try await fixture.buy(product, token: token).signedReceipt
            let downloaded = try await fixture.download(product, receipt: receipt, token: token)
            #expect(downloaded.bytes.count == original.count)
            #expect(downloaded.bytes == original)
            #expect(downloaded.sha256 == Array(SHA256.hash(data: original)))
            #expect(downloaded.chunkIndexes == Array(0..<256))
            let item = try #require(fixture.content.items.first)
            if product == "big.random" {
                #expect(
                    item.chunks.allSatisfy { !$0.compressed }, "noise is stored raw: compression does not shrink it")
            } else {
                #expect(item.compressedSize < item.originalSize / 10)
            }
        }
    }

    /// Each chunk announces SHA-256's state after the bytes before it: the first SHA-256's initial value, each
    /// chunk hashed from its own state ends in the next one's, and the last, padded, gives the header's SHA-256.
    /// A resumed stream's first state is that of the bytes before it; a chunk size that is not a multiple of 64
    /// announces none.
    @Test func chunksAnnounceSHA256StatesThatChainToTheFileDigest() async throws {
        let original = randomBytes((3 << 20) + 100)  // 12 whole chunks of 256 KiB and 100 bytes
        try await ContentFixture.with(files: ["book.swift": original]) { fixture in
            let token = try fixture.newAccount()
            let receipt = try await fixture.buy("book.swift", token: token).signedReceipt
            let downloaded = try await fixture.download("book.swift", receipt: receipt, token: token)
            #expect(downloaded.states.count == 13)
            #expect(downloaded.states.first == SHA256Hasher.State.initial.bytes)
            var end: SHA256Hasher?
            for (number, stateBytes) in downloaded.states.enumerated() {
                let state = try #require(SHA256Hasher.State(bytes: stateBytes), "chunk \(number)'s state is 32 bytes")
                if let end { #expect(end.blockState == state, "chunk \(number - 1) ends in chunk \(number)'s state") }
                var hasher = try #require(SHA256Hasher(state: state, count: UInt64(number) << 18))
                original[(number << 18)..<min((number + 1) << 18, original.count)].withUnsafeBytes { hasher.update($0) }
                end = hasher
            }
            #expect(end?.finalize() == downloaded.header?.sha256)
            #expect(downloaded.header?.sha256 == Array(SHA256.hash(data: original)))

            let resumed = try await fixture.download(
                "book.swift", receipt: receipt, token: token, resumeOffset: 5 << 18)
            var prefix = SHA256Hasher()
            original[..<(5 << 18)].withUnsafeBytes { prefix.update($0) }
            #expect(resumed.chunkIndexes.first == 5)
            #expect(resumed.states.first == prefix.blockState?.bytes)
        }
        try await ContentFixture.with(files: ["book.swift": original], chunkSize: 1000) { fixture in
            let token = try fixture.newAccount()
            let receipt = try await fixture.buy("book.swift", token: token).signedReceipt
            let downloaded = try await fixture.download("book.swift", receipt: receipt, token: token)
            #expect(downloaded.bytes == original)
            #expect(
                !downloaded.states.isEmpty && downloaded.states.allSatisfy(\.isEmpty),
                "1000-byte chunks announce no states")
        }
    }

    @Test func interruptedDownloadResumesFromTheLastCompleteChunk() async throws {
        let original = randomBytes(3 << 20)  // 12 chunks of 256 KiB
        try await ContentFixture.with(files: ["book.swift": original]) { fixture in
            let token = try fixture.newAccount()
            let receipt = try await fixture.buy("book.swift", token: token).signedReceipt
            // A client whose connection dies after 5 chunks.
            let doomed = RPCClient(
                host: "127.0.0.1", port: try #require(fixture.content.port),
                configuration: try fixtureClientConfiguration())
            let partial = try await fixture.download(
                "book.swift", receipt: receipt, token: token, stopAfter: 5, client: doomed)
            await doomed.close()
            #expect(partial.chunkIndexes == [0, 1, 2, 3, 4])
            // Later, the same receipt, from the end of the last complete chunk (not chunk-aligned: a byte count).
            let resumeOffset = UInt64(partial.bytes.count)
            let rest = try await fixture.download(
                "book.swift", receipt: receipt, token: token, resumeOffset: resumeOffset)
            #expect(rest.header?.startOffset == resumeOffset)
            #expect(rest.chunkIndexes.first == 5, "nothing before the resume offset is sent again")
            #expect(partial.bytes + rest.bytes == original)
            // An offset inside a chunk starts at that chunk; past the end is refused.
            let inside = try await fixture.download(
                "book.swift", receipt: receipt, token: token, resumeOffset: resumeOffset + 1000, stopAfter: 1)
            #expect(inside.header?.startOffset == resumeOffset)
            let error = await #expect(throws: RPCError.self) {
                _ = try await fixture.download(
                    "book.swift", receipt: receipt, token: token, resumeOffset: UInt64(original.count) + 1)
            }
            #expect(error?.code == .outOfRange)
            // Resuming needed no new purchase: the account has one transaction.
            let account = try await fixture.store.store.authenticate(token: token)
            #expect(try fixture.store.store.ledger.transactions(accountID: account.id).count == 1)
        }
    }

    @Test func aDownloadResumedAtExactlyTheFileSizeGetsTheHeaderAlone() async throws {
        let original = randomBytes((3 << 20) + 1000)  // the last chunk is short
        try await ContentFixture.with(files: ["book.swift": original]) { fixture in
            let token = try fixture.newAccount()
            let receipt = try await fixture.buy("book.swift", token: token).signedReceipt
            // Every byte saved, the rename not done yet: nothing is sent again (the last chunk was, for ever).
            let done = try await fixture.download(
                "book.swift", receipt: receipt, token: token, resumeOffset: UInt64(original.count))
            #expect(done.header?.startOffset == UInt64(original.count))
            #expect(done.chunkIndexes.isEmpty)
        }
    }

    @Test func restartReusesPreparedChunksAndAChangedFileIsPreparedAgain() async throws {
        let directory = try makeContentDirectory(files: ["book.swift": proseBytes(2 << 20), "file.one": [1]])
        defer { try? FileManager.default.removeItem(atPath: directory) }
        func open() async throws -> ContentServer {
            let server = try ContentServer(
                configuration: ContentConfiguration(
                    contentDirectory: directory, storePort: 1, storeCredential: "unused"))
            try await server.prepare()
            return server
        }
        let first = try await open()
        #expect(first.items.allSatisfy { !$0.reused })
        let chunksFile = try #require(
            FileManager.default.subpaths(atPath: directory + "/.kiosk-prepared")?
                .first { $0.hasSuffix("chunks.bin") })
        let stamp =
            try FileManager.default.attributesOfItem(atPath: directory + "/.kiosk-prepared/" + chunksFile)[
                .modificationDate] as? Date
        let second = try await open()
        #expect(second.items.allSatisfy { $0.reused }, "nothing recompressed on restart")
        #expect(second.items.map(\.sha256) == first.items.map(\.sha256))
        let again =
            try FileManager.default.attributesOfItem(atPath: directory + "/.kiosk-prepared/" + chunksFile)[
                .modificationDate] as? Date
        #expect(stamp == again, "prepared files untouched")
        // An index damaged on disk (a state that is not hex) is prepared again, not served or trapped on.
        let indexPath =
            directory + "/.kiosk-prepared/" + (chunksFile as NSString).deletingLastPathComponent + "/index.json"
        let index = try String(contentsOfFile: indexPath, encoding: .utf8)
        let firstState = try #require(
            second.items.first {
                indexPath.contains(Array(SHA256.hash(data: Array($0.entry.productID.utf8))).hexString)
            }?
            .chunkStates.first?.hexString)
        try index.replacingOccurrences(of: firstState, with: "!!" + firstState.dropFirst(2)).write(
            toFile: indexPath, atomically: true, encoding: .utf8)
        let repaired = try await open()
        #expect(repaired.items.filter { !$0.reused }.count == 1, "the damaged one is prepared again")
        #expect(repaired.items.allSatisfy { $0.chunkStates.allSatisfy { $0.count == 32 } })
        // Change one file: that one is prepared again, the other reused.
        try Data(proseBytes(3 << 20)).write(to: URL(fileURLWithPath: directory + "/files/book.swift.bin"))
        let third = try await open()
        let book = try #require(third.items.first { $0.entry.productID == "book.swift" })
        #expect(!book.reused)
        #expect(book.originalSize == 3 << 20)
        #expect(third.items.first { $0.entry.productID == "file.one" }?.reused == true)
    }

    @Test func downloadLimitsPerAccount() async throws {
        try await ContentFixture.with(files: ["big.random": randomBytes(8 << 20), "file.one": [7]], perAccount: 1) {
            fixture in
            let token = try fixture.newAccount()
            let big = try await fixture.buy("big.random", token: token).signedReceipt
            let small = try await fixture.buy("file.one", token: token).signedReceipt
            // Hold one download open: read its header and stop reading (the window stops the server).
            var held = fixture.contentClient.serverStreaming(
                "/kiosk.content.v1.Content/Download",
                request: ContentV1.DownloadRequest(signedReceipt: big, productID: "big.random"),
                response: ContentV1.DownloadPart.self,
                options: CallOptions(metadata: fixture.metadata(await fixture.contentToken(token)))
            ).makeAsyncIterator()
            #expect(try await held.next()?.header != nil)
            let error = await #expect(throws: RPCError.self) {
                _ = try await fixture.download("file.one", receipt: small, token: token)
            }
            #expect(error?.code == .resourceExhausted)
            // Another account is not limited by this one.
            let other = try fixture.newAccount()
            let theirs = try await fixture.buy("file.one", token: other).signedReceipt
            #expect(try await fixture.download("file.one", receipt: theirs, token: other).bytes == [7])
        }
    }
}
