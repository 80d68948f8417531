import Foundation
import KioskStoreCore
import Testing

/// The catalog file: every refusal names the file, the product and the field.
@Suite("Catalog")
struct CatalogTests {
    @Test func badCatalogsNameFileProductAndField() throws {
        let cases: [(String, String)] = [
            ("[]", "catalog.json: is not a JSON object"),
            (#"{"products": 3}"#, #"catalog.json, field "products": must be an array"#),
            (#"{"products": [{"type": "consumable"}]}"#, #"product #1, field "id": is required"#),
            (#"{"products": [{"id": "a b", "type": "consumable"}]}"#, #"product "a b", field "id""#),
            (
                #"{"products": [{"id": "c", "type": "gift", "title": "C", "price": "1", "currency": "USD"}]}"#,
                #"product "c", field "type""#
            ),
            (
                #"{"products": [{"id": "c", "type": "consumable", "title": "C", "price": "1.999999", "currency": "USD", "credits": 1}]}"#,
                #"product "c", field "price""#
            ),
            (
                #"{"products": [{"id": "c", "type": "consumable", "title": "C", "price": "1.255", "currency": "USD", "credits": 1}]}"#,
                #"at most 2 decimals for USD"#
            ),
            (
                #"{"products": [{"id": "c", "type": "consumable", "title": "C", "price": "1", "currency": "usd", "credits": 1}]}"#,
                #"field "currency""#
            ),
            (
                #"{"products": [{"id": "c", "type": "consumable", "title": "C", "price": "1", "currency": "USD"}]}"#,
                #"product "c", field "credits": is required"#
            ),
            (
                #"{"products": [{"id": "c", "type": "consumable", "title": "C", "price": "1", "currency": "USD", "credits": true}]}"#,
                #"field "credits": must be a whole number"#
            ),
            (
                #"{"products": [{"id": "s", "type": "auto-renewable-subscription", "title": "S", "price": "1", "currency": "USD"}]}"#,
                #"product "s", field "subscription_period""#
            ),
            (
                #"{"products": [{"id": "n", "type": "non-consumable", "title": "N", "price": "1", "currency": "USD", "max_quantity": 5}]}"#,
                #"field "max_quantity": must be 1"#
            ),
            (
                #"{"products": [{"id": "n", "type": "non-consumable", "title": "N", "price": "1", "currency": "USD", "prise": "2"}]}"#,
                #"product "n", field "prise": unknown field"#
            ),
            (
                #"{"products": [{"id": "d", "type": "non-consumable", "title": "D", "price": "1", "currency": "USD"}, {"id": "d", "type": "non-consumable", "title": "D", "price": "1", "currency": "USD"}]}"#,
                #"field "id": appears twice"#
            ),
        ]
        for (json, expected) in cases {
            let error = #expect(throws: CatalogError.self) { try Catalog.parse(Data(json.utf8), file: "catalog.json") }
            #expect(
                error?.description.contains(expected) == true,
                "\(error?.description ?? "no error") should contain \(expected)")
        }
    }

    @Test func theExampleCatalogLoads() throws {
        let example = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent()
            .appendingPathComponent("Scripts/examples/catalog.json").path
        let catalog = try Catalog.load(path: example)
        #expect(catalog.products.count == 7)
        #expect(catalog.product("pro.monthly")?.introductoryOffer?.price == "0")
        #expect(catalog.product("credits.5")?.credits == 5)
        #expect(catalog.product("season.pass")?.subscriptionPeriod == SubscriptionPeriod(iso8601: "P3M"))
        #expect(catalog.defaultStorefront == "USA" && catalog.storefronts == ["USA", "FRA", "JPN"])
        #expect(catalog.product("filter.sepia", storefront: "JPN").map { "\($0.price) \($0.currency)" } == "450 JPY")
        #expect(throws: CatalogError.self) { try Catalog.load(path: example + ".missing") }
    }

    @Test func pricesPerStorefront() throws {
        func parse(_ extra: String, storefront: String = "") throws(CatalogError) -> Catalog {
            let json = """
                {\(storefront) "products": [{"id": "pro", "type": "auto-renewable-subscription", "title": "Pro",
                  "price": "4.99", "currency": "USD", "subscription_period": "P1M",
                  "introductory_offer": {"price": "0.99"},
                  "promotional_offers": [{"id": "back", "price": "0"}]\(extra)}]}
                """
            return try Catalog.parse(Data(json.utf8), file: "catalog.json")
        }
        let catalog = try parse(
            #", "prices": {"FRA": {"price": "5.49", "currency": "EUR", "offers": {"introductory": "1.09"}}}"#)
        let french = try #require(catalog.product("pro", storefront: "FRA"))
        #expect(french.price == "5.49" && french.currency == "EUR")
        #expect(french.introductoryOffer?.price == "1.09")
        #expect(french.offer("back")?.price == "0", "a free offer is free everywhere")
        #expect(catalog.product("pro", storefront: "DEU")?.price == "4.99", "an unlisted storefront pays the default")
        #expect(catalog.product("pro", storefront: "")?.currency == "USD")
        #expect(try parse("", storefront: #""storefront": "FRA","#).defaultStorefront == "FRA")

        let refusals: [(String, String, String)] = [
            (#", "prices": []"#, "", #"field "prices": must be an object"#),
            (#", "prices": {"fr": {"price": "1", "currency": "EUR"}}"#, "", "not an ISO 3166-1 alpha-3"),
            (#", "prices": {"USA": {"price": "1", "currency": "USD"}}"#, "", "the catalog's default storefront"),
            (
                #", "prices": {"FRA": {"price": "1.999", "currency": "EUR", "offers": {"introductory": "1"}}}"#, "",
                "at most 2 decimals for EUR"
            ),
            (#", "prices": {"FRA": {"price": "5", "currency": "eur"}}"#, "", "ISO 4217"),
            (
                #", "prices": {"FRA": {"price": "5", "currency": "EUR"}}"#, "",
                "offer introductory is paid (0.99 USD); give its price in EUR"
            ),
            (
                #", "prices": {"FRA": {"price": "5", "currency": "EUR", "offers": {"gone": "1"}}}"#, "",
                "no offer \"gone\""
            ),
            (#", "prices": {"FRA": {"price": "5", "currency": "EUR", "tax": 1}}"#, "", #"unknown field "tax""#),
            ("", #""storefront": "France","#, #"field "storefront""#),
        ]
        for (extra, storefront, expected) in refusals {
            let error = #expect(throws: CatalogError.self) { try parse(extra, storefront: storefront) }
            #expect(
                error?.description.contains(expected) == true,
                "\(error?.description ?? "no error") should contain \(expected)")
            if !extra.isEmpty { #expect(error?.product == "\"pro\"", "names the product") }
        }
    }

    @Test func threeDecimalCurrenciesKeepTheirThirdDecimal() throws {
        let catalog = try Catalog.parse(
            Data(
                #"{"products": [{"id": "k", "type": "non-consumable", "title": "K", "price": "1.255", "currency": "KWD"}]}"#
                    .utf8),
            file: "catalog.json")
        let product = try #require(catalog.product("k"))
        #expect(Money(decimal: product.price, currency: product.currency)?.minorUnits == 1255)
    }

    @Test func subscriptionFieldsAndOffers() throws {
        func parse(_ product: String) throws(CatalogError) -> Catalog {
            try Catalog.parse(Data(#"{"products": [\#(product)]}"#.utf8), file: "catalog.json")
        }
        let good = try parse(
            #"{"id": "pro", "type": "auto-renewable-subscription", "title": "Pro", "price": "4.99", "currency": "USD", "subscription_period": "P1M", "group": "g", "level": 2, "grace_period": "P3D", "billing_retry_period": "P20D"}"#
        )
        let product = try #require(good.product("pro"))
        #expect(product.subscriptionGroup == "g" && product.groupLevel == 2)
        #expect(product.gracePeriod?.description == "P3D" && product.billingRetryPeriod.description == "P20D")
        #expect(throws: CatalogError.self) {
            try parse(
                #"{"id": "x", "type": "non-consumable", "title": "X", "price": "1", "currency": "USD", "group": "g"}"#)
        }
        let offers = try parse(
            #"{"id": "pro", "type": "auto-renewable-subscription", "title": "Pro", "price": "4.99", "currency": "USD", "subscription_period": "P1M", "introductory_offer": {"price": "0", "period": "P1W"}, "promotional_offers": [{"id": "winback", "price": "1.99", "periods": 3}]}"#
        )
        let offered = try #require(offers.product("pro"))
        #expect(
            offered.introductoryOffer
                == OfferTerms(id: "introductory", price: "0", period: SubscriptionPeriod(iso8601: "P1W")!, periods: 1))
        #expect(offered.offer("winback")?.periods == 3 && offered.offer("winback")?.period.description == "P1M")
        let refusals: [(String, String)] = [
            (
                #"{"id": "pro", "type": "auto-renewable-subscription", "title": "Pro", "price": "4.99", "currency": "USD", "subscription_period": "P1M", "promotional_offers": [{"id": "introductory", "price": "1"}]}"#,
                "promotional_offers"
            ),
            (
                #"{"id": "pro", "type": "auto-renewable-subscription", "title": "Pro", "price": "4.99", "currency": "USD", "subscription_period": "P1M", "grace_period": "six days"}"#,
                "grace_period"
            ),
        ]
        for (json, field) in refusals {
            let error = #expect(throws: CatalogError.self) { try parse(json) }
            #expect(error?.field == field)
        }
        let error = #expect(throws: CatalogError.self) {
            try Catalog.parse(Data(#"{"offer_keys": {"k": "abcd"}, "products": []}"#.utf8), file: "catalog.json")
        }
        #expect(error?.field == "offer_keys")
    }
}
