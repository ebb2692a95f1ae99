// harness.cpp — a C++ measurement harness talking to TiraStore through its
// C ABI (include/tirastore.h).
//
//   g++ -std=c++17 -Iinclude examples/harness.cpp -Lbuild -ltirastore
//       -Wl,-rpath,$PWD/build -o build/harness      (one command line)
//   ./build/harness /tmp/cache.db
//
// It opens the store, records one measurement, looks it up and prints the
// raw JSON replies. Every status code is checked: on failure it prints the
// library's error message and exits 1. Every buffer the library hands back
// is released with tirastore_free (by the Reply wrapper below), and the
// handle is closed by Store's destructor at the latest.
//
// No JSON library: requests are small enough to build by hand, with
// json_string() escaping the values, and replies are printed as they come.

#include "tirastore.h"

#include <cstdint>
#include <cstdio>
#include <exception>
#include <iostream>
#include <stdexcept>
#include <string>
#include <utility>

namespace tirastore {

// json_string quotes s as a JSON string. s is UTF-8 and passes through
// unchanged except for the characters JSON requires to be escaped.
std::string json_string(const std::string &s) {
    std::string out;
    out.reserve(s.size() + 2);
    out += '"';
    for (char ch : s) {
        const auto c = static_cast<unsigned char>(ch);
        switch (c) {
        case '"': out += "\\\""; break;
        case '\\': out += "\\\\"; break;
        case '\n': out += "\\n"; break;
        case '\r': out += "\\r"; break;
        case '\t': out += "\\t"; break;
        case '\b': out += "\\b"; break;
        case '\f': out += "\\f"; break;
        default:
            if (c < 0x20) {
                char buf[8];
                std::snprintf(buf, sizeof buf, "\\u%04x", c);
                out += buf;
            } else {
                out += ch;
            }
        }
    }
    out += '"';
    return out;
}

// Reply owns one buffer returned through a "char **out" parameter and frees
// it exactly once.
class Reply {
public:
    Reply() = default;
    ~Reply() { tirastore_free(buf_); }
    Reply(const Reply &) = delete;
    Reply &operator=(const Reply &) = delete;

    char **out() { return &buf_; }
    std::string text() const { return buf_ ? std::string(buf_) : std::string(); }

private:
    char *buf_ = nullptr;
};

// Error is a failed call: the status code and the library's message.
class Error : public std::runtime_error {
public:
    Error(std::string what, int status, std::string type)
        : std::runtime_error(std::move(what)), status_(status), type_(std::move(type)) {}
    int status() const { return status_; }
    const std::string &type() const { return type_; }

private:
    int status_;
    std::string type_;
};

namespace detail {

// string_field extracts the string value of "name" from a flat reply such
// as {"error":{"type":"ValueError","message":"...","code":2}}. Enough for
// error replies, whose shape the header fixes; not a general JSON parser.
std::string string_field(const std::string &doc, const std::string &name) {
    const std::string key = "\"" + name + "\":\"";
    auto pos = doc.find(key);
    if (pos == std::string::npos) {
        return std::string();
    }
    std::string value;
    for (pos += key.size(); pos < doc.size() && doc[pos] != '"'; ++pos) {
        if (doc[pos] == '\\' && pos + 1 < doc.size()) {
            const char e = doc[++pos];
            switch (e) {
            case 'n': value += '\n'; break;
            case 't': value += '\t'; break;
            case 'r': value += '\r'; break;
            case 'b': value += '\b'; break;
            case 'f': value += '\f'; break;
            case 'u': value += "\\u"; break; // kept escaped: only printed
            default: value += e;             // \" \\ \/
            }
        } else {
            value += doc[pos];
        }
    }
    return value;
}

// check turns a non-OK status into an Error naming what failed.
void check(int status, const std::string &what, const Reply &reply) {
    if (status == TIRASTORE_OK) {
        return;
    }
    const std::string doc = reply.text();
    std::string message = string_field(doc, "message");
    if (message.empty()) {
        message = doc.empty() ? "(no error document)" : doc;
    }
    std::string type = string_field(doc, "type");
    throw Error(what + " failed with status " + std::to_string(status) +
                    (type.empty() ? "" : " (" + type + ")") + ": " + message,
                status, type);
}

// result strips the {"result": ...} envelope of a successful reply.
std::string result(const std::string &doc) {
    const std::string head = "{\"result\":";
    if (doc.size() < head.size() + 1 || doc.compare(0, head.size(), head) != 0 || doc.back() != '}') {
        throw Error("unexpected reply: " + doc, TIRASTORE_ERR_INTERNAL, "RuntimeError");
    }
    return doc.substr(head.size(), doc.size() - head.size() - 1);
}

} // namespace detail

// Store is one open TiraStore handle.
class Store {
public:
    explicit Store(const std::string &db_path, const std::string &options_json = "{}") {
        Reply reply;
        detail::check(tirastore_open(db_path.c_str(), options_json.c_str(), &handle_, reply.out()),
                      "tirastore_open(" + db_path + ")", reply);
        info_ = detail::result(reply.text());
    }

    ~Store() {
        if (handle_ != 0) {
            tirastore_close(handle_, nullptr); // a destructor must not throw
        }
    }

    Store(const Store &) = delete;
    Store &operator=(const Store &) = delete;

    // info is open's result: db_path, lock_path, source_project, ...
    const std::string &info() const { return info_; }

    // call runs one method and returns its result as JSON text; it throws
    // Error when the library reports a failure.
    std::string call(const std::string &method, const std::string &args_json = "{}") {
        Reply reply;
        detail::check(tirastore_call(handle_, method.c_str(), args_json.c_str(), reply.out()),
                      method, reply);
        return detail::result(reply.text());
    }

    // close releases the handle now, reporting errors (the destructor
    // cannot).
    void close() {
        const uint64_t h = std::exchange(handle_, 0);
        Reply reply;
        detail::check(tirastore_close(h, reply.out()), "tirastore_close", reply);
    }

private:
    uint64_t handle_ = 0;
    std::string info_;
};

} // namespace tirastore

namespace {

// Measurement is what a real harness would get from compiling and running
// the Tiramisu program under a schedule.
struct Measurement {
    bool is_legal;
    std::string execution_times; // a JSON list
};

std::string program_args(const std::string &name, const std::string &source, const std::string &schedule) {
    using tirastore::json_string;
    return "{\"program_name\":" + json_string(name) +
           ",\"program_source_code\":" + json_string(source) +
           ",\"tiralib_schedule_string\":" + json_string(schedule) + "}";
}

std::string record_args(const std::string &name, const std::string &source, const std::string &schedule,
                        const Measurement &m) {
    std::string args = program_args(name, source, schedule);
    args.pop_back(); // reopen the object
    args += ",\"is_legal\":";
    args += m.is_legal ? "true" : "false";
    args += ",\"execution_times\":" + m.execution_times + "}";
    return args;
}

int run(const std::string &db_path) {
    const std::string name = "blur";
    const std::string source =
        "#include <tiramisu/tiramisu.h>\n"
        "// a 2-D blur\n"
        "void blur() {\n"
        "    var i(\"i\", 0, 1024), j(\"j\", 0, 1024);\n"
        "    computation c1(\"c1\", {i, j}, in(i, j) + in(i, j + 1));\n"
        "}\n";
    const std::string schedule = "S(L0,L1,4,8,comps=['c1'])";

    std::cout << "tirastore " << tirastore_version() << "\n";

    tirastore::Store store(db_path, "{\"source_project\":" + tirastore::json_string("cpp-harness") + "}");
    std::cout << "open:   " << store.info() << "\n";

    const std::string args = program_args(name, source, schedule);
    std::cout << "lookup: " << store.call("lookup", args) << "\n";

    const Measurement m{true, "[0.042,0.039,0.041]"};
    const std::string written = store.call("record", record_args(name, source, schedule, m));
    std::cout << "record: " << written << (written == "false" ? " (already stored)" : "") << "\n";

    const std::string found = store.call("lookup", args);
    std::cout << "lookup: " << found << "\n";
    if (found == "null") {
        std::cerr << "harness: lookup missed the record just written\n";
        return 1;
    }

    std::cout << "count:  " << store.call("count") << "\n";
    store.close();
    std::cout << "closed\n";
    return 0;
}

} // namespace

int main(int argc, char **argv) {
    if (argc != 2) {
        std::cerr << "usage: " << (argc > 0 ? argv[0] : "harness") << " DB_PATH\n";
        return 2;
    }
    try {
        return run(argv[1]);
    } catch (const tirastore::Error &e) {
        std::cerr << "harness: " << e.what() << "\n";
        return 1;
    } catch (const std::exception &e) {
        std::cerr << "harness: " << e.what() << "\n";
        return 1;
    }
}
