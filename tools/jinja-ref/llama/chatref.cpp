// chatref: llama.cpp's own chat-template rendering and reply parsing, for
// k3's core/chat parity tests. Links the prebuilt libllama-common of the
// reference release and calls what llama-server calls:
// common_chat_templates_apply (prompt + generation prompt) and
// common_chat_parse (reply -> reasoning, content, tool calls).
//
// stdin:  {"template": "...",
//          "renders": [{"messages": [...], "tools": [...], "add_generation_prompt": true,
//                       "kwargs": {"name": <json>, ...}}],
//          "parses":  [{"text": "...", "tools": [...], "kwargs": {...},
//                       optional: "partial": bool, "tool_choice": "auto|required|none",
//                       "json_schema": {...}, "reasoning_format": "none|deepseek|auto",
//                       "dump": bool}]}
// stdout: {"renders": [{"prompt": "...", "generation_prompt": "..."} | {"error": "..."}],
//          "parses":  [{"reasoning_content": "...", "content": "...",
//                       "tool_calls": [{"name": "...", "arguments": "...", "id": "..."}],
//                       with "dump": "parser": the PEG parser, "grammar", "grammar_lazy",
//                       "triggers": [{"type": n, "value": "..."}], "generation_prompt"}
//                      | {"error": "..."}]}
#include "chat.h"
#include "json.h"

#include <iostream>
#include <map>
#include <sstream>
#include <string>

static common_chat_templates_inputs inputs_of(const common_json & req) {
    common_chat_templates_inputs in;
    in.messages = common_chat_msgs_parse_oaicompat(req.at("messages"));
    if (req.contains("tools")) {
        in.tools = common_chat_tools_parse_oaicompat(req.at("tools"));
    }
    in.add_generation_prompt = req.value("add_generation_prompt", false);
    in.reasoning_format      = COMMON_REASONING_FORMAT_DEEPSEEK;
    in.parallel_tool_calls   = true;
    if (req.contains("kwargs")) {
        for (const auto & [key, val] : req.at("kwargs").items()) {
            in.chat_template_kwargs[key] = val.dump();
        }
    }
    if (req.contains("tool_choice")) {
        in.tool_choice = common_chat_tool_choice_parse_oaicompat(req.at("tool_choice").get<std::string>());
    }
    if (req.contains("json_schema")) {
        in.json_schema = req.at("json_schema").dump();
    }
    if (req.contains("reasoning_format")) {
        in.reasoning_format = common_reasoning_format_from_name(req.at("reasoning_format").get<std::string>());
    }
    return in;
}

static common_json render(const common_chat_templates * tmpls, const common_json & req) {
    common_json r = common_json::object();
    try {
        auto params = common_chat_templates_apply(tmpls, inputs_of(req));
        r["prompt"]            = params.prompt;
        r["generation_prompt"] = params.generation_prompt;
    } catch (const std::exception & e) {
        r["error"] = std::string(e.what());
    }
    return r;
}

// parse applies the template to a one-message conversation with the case's
// tools and kwargs, as llama-server does for a request, and parses the text
// with the parser that comes back.
static common_json parse(const common_chat_templates * tmpls, const common_json & req) {
    common_json r = common_json::object();
    try {
        common_json conv = common_json::object();
        conv["messages"] = common_json::parse(R"([{"role":"user","content":"hi"}])");
        conv["add_generation_prompt"] = true;
        if (req.contains("tools")) {
            conv["tools"] = req.at("tools");
        }
        for (const char * k : {"kwargs", "tool_choice", "json_schema", "reasoning_format"}) {
            if (req.contains(k)) {
                conv[k] = req.at(k);
            }
        }
        // one template application per distinct request: many replies
        // (every prefix of a reply, say) share it
        static std::map<std::string, std::pair<common_chat_params, common_chat_parser_params>> cache;
        auto in  = inputs_of(conv);
        auto key = conv.dump();
        auto it  = cache.find(key);
        if (it == cache.end()) {
            auto params = common_chat_templates_apply(tmpls, in);
            common_chat_parser_params pp(params);
            pp.reasoning_format = in.reasoning_format;
            if (!params.parser.empty()) {
                pp.parser.load(params.parser);
            }
            it = cache.emplace(key, std::make_pair(params, pp)).first;
        }
        const auto & params = it->second.first;
        const auto & pp     = it->second.second;
        if (req.value("dump", false)) {
            r["parser"]            = params.parser.empty() ? std::string() : pp.parser.dump(pp.parser.root());
            r["grammar"]           = params.grammar;
            r["grammar_lazy"]      = params.grammar_lazy;
            r["generation_prompt"] = params.generation_prompt;
            common_json trs = common_json::array();
            for (const auto & t : params.grammar_triggers) {
                trs.push_back({{"type", (int) t.type}, {"value", t.value}});
            }
            r["triggers"] = trs;
        }
        common_chat_msg msg = common_chat_parse(req.at("text").get<std::string>(), req.value("partial", false), pp);
        r["reasoning_content"] = msg.reasoning_content;
        r["content"]           = msg.content;
        common_json calls = common_json::array();
        for (const auto & tc : msg.tool_calls) {
            common_json c = common_json::object();
            c["name"]      = tc.name;
            c["arguments"] = tc.arguments;
            c["id"]        = tc.id;
            calls.push_back(c);
        }
        r["tool_calls"] = calls;
    } catch (const std::exception & e) {
        r["error"] = std::string(e.what());
    }
    return r;
}

int main() {
    std::stringstream ss;
    ss << std::cin.rdbuf();
    try {
        common_json req   = common_json::parse(ss.str());
        auto        tmpls = common_chat_templates_init(nullptr, req.at("template").get<std::string>(), "", "");
        common_json out   = common_json::object();
        common_json renders = common_json::array();
        common_json parses  = common_json::array();
        if (req.contains("renders")) {
            const common_json & rs = req.at("renders");
            for (size_t i = 0; i < rs.size(); i++) {
                renders.push_back(render(tmpls.get(), rs.at(i)));
            }
        }
        if (req.contains("parses")) {
            const common_json & ps = req.at("parses");
            for (size_t i = 0; i < ps.size(); i++) {
                parses.push_back(parse(tmpls.get(), ps.at(i)));
            }
        }
        out["renders"] = renders;
        out["parses"]  = parses;
        std::cout << out.dump() << std::endl;
    } catch (const std::exception & e) {
        std::cerr << "chatref: " << e.what() << std::endl;
        return 1;
    }
    return 0;
}
