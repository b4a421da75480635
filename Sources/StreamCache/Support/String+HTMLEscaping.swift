extension StringProtocol {
    /// The text with the characters HTML gives a meaning escaped, safe in an element's text and
    /// in a quoted attribute value: the pages the tool's sign-in listener and the proxy's folder
    /// listings show names a user or a service chose.
    package var htmlEscaped: String {
        var result = ""
        result.reserveCapacity(utf8.count)
        for character in self {
            switch character {
            case "&": result += "&amp;"
            case "<": result += "&lt;"
            case ">": result += "&gt;"
            case "\"": result += "&quot;"
            case "'": result += "&#39;"
            default: result.append(character)
            }
        }
        return result
    }
}
