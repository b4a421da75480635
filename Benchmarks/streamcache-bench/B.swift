@main struct B { static func main() {} }
